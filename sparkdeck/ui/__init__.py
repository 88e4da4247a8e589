"""sparkdeck's Textual interface. The only package that may import Textual.

Nothing is imported here, so `import sparkdeck.ui.readers` stays free of Textual; start the
app with `sparkdeck.ui.app.run_app()`.
"""
