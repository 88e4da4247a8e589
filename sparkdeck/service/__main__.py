"""`python -m sparkdeck.service`: the service in the foreground, the way the detached start
and the systemd unit run it. Same as `sparkdeck service run`, without building the whole
CLI first: the long-running process then holds only what the service uses (docs/service.md).
"""

import sys
import warnings

# The docker SDK speaks to Docker through requests, and requests imports a character-set
# detector (charset_normalizer, 2.7 MiB of this process's 45 MiB budget) only to guess the
# encoding of a text body that names none. Docker answers JSON (requests reads it as UTF-8
# without guessing) and the odd plain-text error, which requests then reads as UTF-8 too. A
# None entry makes requests find no detector, as it does where none is installed; its
# warning saying so is expected here.
sys.modules.setdefault("charset_normalizer", None)  # type: ignore[arg-type]
warnings.filterwarnings("ignore", message="Unable to find acceptable character detection")

from sparkdeck.service.server import serve  # noqa: E402

raise SystemExit(serve())
