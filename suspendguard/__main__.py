import sys

from suspendguard.cli import main

sys.exit(main())
