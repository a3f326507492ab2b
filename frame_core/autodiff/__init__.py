"""frame_core.autodiff package."""
