"""Egress: each job on its own internal network whose only way out is a filtering proxy (``PI_EGRESS``)."""
