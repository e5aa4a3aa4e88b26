"""Operator that keeps ExporterSet pools of virtual exporters at their target."""
