import sys

from mirror_sd.gpu_check.cli import main

sys.exit(main())
