# The harness CLI with the server's API key (read inside the serving container from its secret).
import os
import sys
from pathlib import Path

from sparkserve.levels import common

key = Path(os.environ.get("API_KEY_FILE") or "/run/secrets/api_key").read_text().strip()
_init = common.Client.__init__


def _with_key(self, base_url, timeout=300, api_key=key):
    _init(self, base_url, timeout, api_key)


common.Client.__init__ = _with_key
from sparkserve.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
