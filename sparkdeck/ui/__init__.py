"""sparkdeck's Textual interface. The only package that may import Textual.

Nothing is imported here, so `import sparkdeck.ui.readers` stays free of Textual; start the
app with `sparkdeck.ui.run.run_app()`.
"""

from pathlib import Path

STYLESHEET = Path(__file__).with_name("sparkdeck.tcss")
"""The one stylesheet (theme variables only); hosts that show a widget alone load it too."""
