"""Screens shown over the dashboard."""
