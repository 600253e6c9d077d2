"""Repository-wide pytest setup."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "real_pair: loads the real default model pair (builds its cache the first "
                   "time: minutes, ~10 GB RAM); deselect with -m 'not real_pair'")
