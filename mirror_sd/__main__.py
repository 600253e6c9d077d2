import sys

from mirror_sd.cli import main

sys.exit(main())
