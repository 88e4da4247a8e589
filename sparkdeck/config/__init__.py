"""Where sparkdeck keeps things and how it reads what the user wrote: the settings file and
its schema, the config/data/state/runtime directories, TOML files read safely, and the file
lock that lets only one launch or one service run at a time."""
