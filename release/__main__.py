"""``python -m release``: see release/publish.py."""

import sys

from release.publish import main

sys.exit(main())
