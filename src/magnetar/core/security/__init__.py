"""Authorization decisions (authentication is the shell's: ``magnetar.security``)."""
