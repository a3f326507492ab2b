"""frame-ops-nn: neural-network ops (conv2d, pooling, normalisation, embedding), initialisers and layers.

The ops register through the ``frame`` entry point (``frame_ops_nn.plugin``);
``frame_ops_nn.init`` holds the initialisers and ``frame_ops_nn.layers`` the
small model helpers.
"""
