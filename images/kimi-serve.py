"""Start kimi-serve from its isolated install dir (see /usr/local/bin/kimi-serve)."""
import sys

sys.path.insert(0, "/opt/kimi/lib")
sys.argv[0] = "kimi-serve"

from entrypoint.cli import main  # noqa: E402

sys.exit(main())
