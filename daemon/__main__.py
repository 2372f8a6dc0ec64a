import sys

from txd.daemon.main import main

sys.exit(main())
