"""Jumpstarter driver of a provisioned QEMU virtual target (see driver.py)."""
