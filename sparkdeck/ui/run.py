"""The terminal UI's life from the `sparkdeck` command: settings, the collector, the app, and
at the end the hand-over of a running engine to a detached service.

Kept apart from the app (sparkdeck.ui.app), which is composition and wiring only: tests
build the app with their own readers and never go through here.
"""

from __future__ import annotations

from sparkdeck.config.settings import settings_or_defaults
from sparkdeck.runtime import connect
from sparkdeck.ui import gc_tuning, quiet_driver
from sparkdeck.ui.app import CatalogLoader, RuntimeFactory, SparkdeckApp
from sparkdeck.ui.messages import read_presets


def run_app(
    catalog_loader: CatalogLoader = read_presets, runtime_factory: RuntimeFactory = connect
) -> int:
    """Run the control panel in this terminal until the user quits; return the exit status."""
    settings, problem = settings_or_defaults()
    gc_tuning.pause_for_startup()  # the app tunes and resumes it after its first frame
    app = SparkdeckApp(
        catalog_loader, runtime_factory, settings=settings, tune_gc=True, lazy_side_tabs=True
    )
    quiet_driver.install(app)  # no input-thread wake-ups while nobody types
    if problem:
        app.call_later(
            app.notify, problem, title="settings.toml ignored", severity="error", markup=False
        )
    app.run()
    _release_captured_streams()
    from sparkdeck.service.relay import hand_over  # an engine is never left unguarded

    handed = hand_over()
    if handed:
        print(handed)
    return app.return_code or 0


def _release_captured_streams() -> None:
    """Point log handlers made while the app ran back at the real stderr.

    A library may make a StreamHandler when it is first imported (charset_normalizer does,
    under the docker SDK's requests), and its stream is then sys.stderr as it was: Textual's
    capture, while a worker imports it. That capture is dead once the app has ended, and
    `logging.shutdown` at exit would flush into it and print a traceback."""
    import logging
    import sys

    loggers = [
        logging.getLogger(),
        *(
            logger
            for logger in logging.Logger.manager.loggerDict.values()
            if isinstance(logger, logging.Logger)
        ),
    ]
    for handler in {h for logger in loggers for h in logger.handlers}:
        if isinstance(handler, logging.StreamHandler) and type(
            handler.stream
        ).__module__.startswith("textual"):
            handler.acquire()  # not setStream: it flushes the dead capture first
            try:
                handler.stream = sys.stderr
            finally:
                handler.release()
