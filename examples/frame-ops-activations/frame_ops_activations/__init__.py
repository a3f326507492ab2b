"""frame-ops-activations: softplus, gelu_tanh (the tanh approximation of gelu), leaky_relu and elu for frame.

An example of a third-party op pack, written only against frame's public
API (``frame_core``'s ``__all__`` and the ``ops`` namespace). Loaded through
the ``frame`` entry point ``activations = frame_ops_activations.plugin``.
"""

__version__ = "0.1.0"
