"""Chapter 08: the variants of attention that current models use.

=====================  ===========================================================
module                 what it holds
=====================  ===========================================================
``flex``               FlexAttention and its readable twin; block masks as tile maps
``mask_mods``          masks as functions ``mask_mod(b, h, q_idx, kv_idx) -> bool``
``score_mods``         score modifications as functions (ALiBi, soft-capping, ...)
``alibi``              ALiBi's per-head slopes and linear biases
``sliding_window``     sliding-window attention and its ring-buffer KV cache
``mla``                multi-head latent attention and its latent cache
``linear_attention``   linear attention, in parallel and as an RNN
=====================  ===========================================================

Import the module you need (``from course_lib.variants import mask_mods as M``).
"""
