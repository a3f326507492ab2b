"""frame-ops-sequence: sequence ops and control flow for frame, registered through the ``frame`` entry point."""
