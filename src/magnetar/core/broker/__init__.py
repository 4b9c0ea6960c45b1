"""The broker as a whole: its settings, its one timer, and the checks over loaded topics."""
