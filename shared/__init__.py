"""The commons: every protocol that reads or writes CIV_ROOT/shared. Never imports `citizen`."""
