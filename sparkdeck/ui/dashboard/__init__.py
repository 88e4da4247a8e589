"""The dashboard's left side: the preset table, the engine card, the log, and launching."""
