"""frame_core.ops_registry package."""
