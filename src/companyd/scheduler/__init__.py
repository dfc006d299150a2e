"""Routines: recurring tasks on APScheduler 3 that survive restarts and report every miss."""
