"""Node tests of ops caramba implements that are expected to fail, with the reason.

``XFAIL[backend][test name] = reason``; ``"*"`` applies to every backend. The entries are
strict xfails: a test that starts passing fails the run until it is taken off the list.
After a change, ``python -m tests.conformance.failures <backend>`` lists the failures with
their reasons.
"""

from __future__ import annotations

# Importer limits and caramba semantics: the same on every backend.
_EVERYWHERE: dict[str, tuple[str, ...]] = {
    'caramba: nn.max_pool2d takes floats only (uint8 pooling is a graph error)': (
        'test_maxpool_2d_uint8',
    ),
    'caramba: reduce.max/min of an empty axis is a graph error (no identity); ONNX gives -inf/inf': (
        'test_reduce_max_empty_set',
        'test_reduce_max_empty_set_bool',
        'test_reduce_min_empty_set',
    ),
    'importer: Attention: nonpad_kv_seqlen (per-batch cache lengths)': (
        'test_attention_4d_causal_nonpad_attn_mask_composition',
        'test_attention_4d_causal_nonpad_batch_prefill',
        'test_attention_4d_causal_nonpad_continued_prefill',
        'test_attention_4d_causal_nonpad_negative_offset_structural_empty',
        'test_attention_4d_causal_padded_kv_bf16',
        'test_attention_4d_diff_heads_mask4d_padded_kv',
        'test_attention_4d_gqa_causal_nonpad_decode',
        'test_attention_4d_gqa_causal_nonpad_decode_fp16',
        'test_attention_4d_padded_kv_bf16',
        'test_attention_local_window_ext_cache_float16_mask',
        'test_attention_local_window_ext_cache_rank2_mask',
        'test_attention_local_window_ext_cache_rank3_head_mask',
        'test_attention_local_window_ext_cache_rank4_batch_mask',
    ),
    'importer: Attention: sliding windows': (
        'test_attention_3d_local_window',
        'test_attention_bidirectional_window',
        'test_attention_local_window',
        'test_attention_local_window_gqa_rank4_mask',
        'test_attention_local_window_rank1_boolean_mask',
        'test_attention_local_window_with_past',
    ),
    'importer: AveragePool: 3-D pooling': (
        'test_averagepool_3d_default',
        'test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False',
        'test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True',
        'test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False',
        'test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True',
        'test_averagepool_3d_dilations_small',
    ),
    'importer: AveragePool: ceil_mode changing the output size': (
        'test_averagepool_2d_ceil',
        'test_averagepool_2d_ceil_last_window_starts_on_pad',
    ),
    'importer: AveragePool: dilated pooling': (
        'test_averagepool_2d_dilations',
    ),
    'importer: BatchNormalization: training mode': (
        'test_batchnorm_epsilon_training_mode',
        'test_batchnorm_example_training_mode',
    ),
    'importer: ConvTranspose: 3-D transposed convolution': (
        'test_convtranspose_3d',
    ),
    'importer: Div: integer division is not a caramba op': (
        'test_center_crop_pad_crop_and_pad_expanded',
        'test_center_crop_pad_crop_axes_chw_expanded',
        'test_center_crop_pad_crop_axes_hwc_expanded',
        'test_center_crop_pad_crop_expanded',
        'test_center_crop_pad_crop_negative_axes_hwc_expanded',
        'test_center_crop_pad_pad_expanded',
        'test_div_int32_trunc',
        'test_div_int8',
        'test_div_uint8',
    ),
    'importer: Dropout: training mode (random masks are not comparable)': (
        'test_training_dropout',
        'test_training_dropout_default',
        'test_training_dropout_default_mask',
        'test_training_dropout_mask',
        'test_training_dropout_zero_ratio',
        'test_training_dropout_zero_ratio_mask',
    ),
    'importer: LpPool: 3-D pooling': (
        'test_lppool_3d_default',
    ),
    'importer: LpPool: dilated pooling': (
        'test_lppool_2d_dilations',
    ),
    'importer: MaxPool: 3-D pooling': (
        'test_maxpool_3d_default',
        'test_maxpool_3d_dilations',
        'test_maxpool_3d_dilations_use_ref_impl',
        'test_maxpool_3d_dilations_use_ref_impl_large',
    ),
    'importer: MaxPool: ceil_mode changing the output size': (
        'test_maxpool_2d_ceil',
        'test_maxpool_2d_ceil_output_size_reduce_by_one',
    ),
    'importer: MaxPool: dilated pooling': (
        'test_maxpool_2d_dilations',
    ),
    'importer: MaxPool: the Indices output': (
        'test_maxpool_with_argmax_2d_precomputed_pads',
        'test_maxpool_with_argmax_2d_precomputed_strides',
    ),
    'importer: Mod: remainder of values computed at run time (caramba has no remainder op)': (
        'test_mod_broadcast',
        'test_mod_float16_mixed_sign_fmod_0',
        'test_mod_float32_mixed_sign_fmod_0',
        'test_mod_float64_mixed_sign_fmod_0',
        'test_mod_float_edge_cases_fmod_0_float16',
        'test_mod_float_edge_cases_fmod_0_float32',
        'test_mod_float_edge_cases_fmod_0_float64',
        'test_mod_int64_fmod',
        'test_mod_mixed_sign_float16',
        'test_mod_mixed_sign_float32',
        'test_mod_mixed_sign_float64',
        'test_mod_mixed_sign_int32',
        'test_mod_mixed_sign_int64',
        'test_mod_mixed_sign_int8',
        'test_mod_uint8',
    ),
    "importer: Pad: mode 'wrap'": (
        'test_wrap_pad',
    ),
    'importer: Pow: integer power is not a caramba op': (
        'test_pow_types_int32_float32',
        'test_pow_types_int32_int32',
        'test_pow_types_int64_float32',
        'test_pow_types_int64_int64',
    ),
    'importer: Range: an input decides a shape but is computed at run time': (
        'test_blackmanwindow_expanded',
        'test_blackmanwindow_symmetric_expanded',
        'test_hammingwindow_expanded',
        'test_hammingwindow_symmetric_expanded',
        'test_hannwindow_expanded',
        'test_hannwindow_symmetric_expanded',
    ),
    "importer: Resize: coordinate_transformation_mode 'tf_crop_and_resize'": (
        'test_resize_tf_crop_and_resize',
        'test_resize_tf_crop_and_resize_axes_2_3',
        'test_resize_tf_crop_and_resize_axes_3_2',
        'test_resize_tf_crop_and_resize_extrapolation_value',
    ),
    'importer: Resize: keep_aspect_ratio_policy': (
        'test_resize_downsample_sizes_nearest_not_larger',
        'test_resize_downsample_sizes_nearest_not_smaller',
        'test_resize_upsample_sizes_nearest_not_larger',
        'test_resize_upsample_sizes_nearest_not_smaller',
    ),
    "importer: ScatterElements: reduction 'max'": (
        'test_scatter_elements_with_reduction_max',
    ),
    "importer: ScatterElements: reduction 'min'": (
        'test_scatter_elements_with_reduction_min',
    ),
    "importer: ScatterElements: reduction 'mul'": (
        'test_scatter_elements_with_reduction_mul',
    ),
    "importer: ScatterND: reduction 'max'": (
        'test_scatternd_max',
        'test_scatternd_max_with_element_indices',
    ),
    "importer: ScatterND: reduction 'min'": (
        'test_scatternd_min',
        'test_scatternd_min_with_element_indices',
    ),
    "importer: ScatterND: reduction 'mul'": (
        'test_scatternd_multiply',
    ),
    'refused at lowering: does not take bfloat16': (
        'test_attention_3d_causal_bf16',
        'test_attention_3d_causal_bf16_expanded',
        'test_attention_4d_attn_mask_causal_bf16',
        'test_attention_4d_attn_mask_causal_bf16_expanded',
        'test_attention_4d_causal_bf16',
        'test_attention_4d_causal_bf16_expanded',
        'test_attention_4d_causal_padded_kv_bf16_expanded',
        'test_attention_4d_padded_kv_bf16_expanded',
        'test_cast_BFLOAT16_to_FLOAT',
        'test_cast_FLOAT_to_BFLOAT16',
        'test_castlike_BFLOAT16_to_FLOAT',
        'test_castlike_BFLOAT16_to_FLOAT_expanded',
        'test_castlike_FLOAT_to_BFLOAT16',
        'test_castlike_FLOAT_to_BFLOAT16_expanded',
        'test_celu_bfloat16',
        'test_celu_bfloat16_expanded',
        'test_compress_bfloat16',
        'test_einsum_batch_matmul_bfloat16',
        'test_einsum_sum_bfloat16',
        'test_einsum_transpose_bfloat16',
        'test_onehot_with_bfloat16_values',
        'test_range_bfloat16_type_positive_delta',
        'test_reversesequence_bfloat16',
    ),
}

# What a backend refuses at lowering (dtypes it does not claim) or computes differently.
_PER_BACKEND: dict[str, dict[str, tuple[str, ...]]] = {
    'webgpu': {
        'refused at lowering: does not take float16': (
            'test_attention_24_qk_matmul_output_mode3_softmax_precision',
            'test_attention_24_qk_matmul_output_mode3_softmax_precision_expanded',
            'test_attention_4d_causal_fp16',
            'test_attention_4d_causal_fp16_expanded',
            'test_attention_4d_fp16',
            'test_attention_4d_fp16_expanded',
            'test_attention_4d_gqa_causal_nonpad_decode_fp16_expanded',
            'test_attention_4d_gqa_with_past_and_present_fp16',
            'test_attention_4d_gqa_with_past_and_present_fp16_expanded',
            'test_attention_local_window_ext_cache_float16_mask_expanded',
            'test_cast_DOUBLE_to_FLOAT16',
            'test_cast_FLOAT16_to_DOUBLE',
            'test_cast_FLOAT16_to_FLOAT',
            'test_cast_FLOAT_to_FLOAT16',
            'test_castlike_DOUBLE_to_FLOAT16',
            'test_castlike_DOUBLE_to_FLOAT16_expanded',
            'test_castlike_FLOAT16_to_DOUBLE',
            'test_castlike_FLOAT16_to_DOUBLE_expanded',
            'test_castlike_FLOAT16_to_FLOAT',
            'test_castlike_FLOAT16_to_FLOAT_expanded',
            'test_castlike_FLOAT_to_FLOAT16',
            'test_castlike_FLOAT_to_FLOAT16_expanded',
            'test_causal_conv_with_state_fp16_expanded',
            'test_causal_conv_with_state_silu_fp16_expanded',
            'test_celu_float16',
            'test_celu_float16_expanded',
            'test_flexattention_fp16_expanded_ver26',
            'test_isinf_float16',
            'test_isnan_float16',
            'test_max_float16',
            'test_min_float16',
            'test_range_float16_type_positive_delta',
            'test_swiglu_float16',
            'test_swiglu_float16_expanded',
        ),
        'refused at lowering: does not take int8': (
            'test_add_int8',
            'test_clip_default_int8_inbounds',
            'test_clip_default_int8_inbounds_expanded',
            'test_clip_default_int8_max',
            'test_clip_default_int8_max_expanded',
            'test_clip_default_int8_min',
            'test_clip_default_int8_min_expanded',
            'test_equal_int8',
            'test_greater_equal_int8',
            'test_greater_equal_int8_expanded',
            'test_greater_int8',
            'test_less_equal_int8',
            'test_less_equal_int8_expanded',
            'test_less_int8',
            'test_max_int8',
            'test_min_int8',
            'test_mul_int8',
            'test_sub_int8',
        ),
        'refused at lowering: does not take uint8': (
            'test_add_uint8',
            'test_equal_uint8',
            'test_greater_equal_uint8',
            'test_greater_equal_uint8_expanded',
            'test_greater_uint8',
            'test_less_equal_uint8',
            'test_less_equal_uint8_expanded',
            'test_less_uint8',
            'test_max_uint8',
            'test_min_uint8',
            'test_mul_uint8',
            'test_reduce_max_bool_inputs',
            'test_reduce_min_bool_inputs',
            'test_sub_uint8',
        ),
    },
    'xla': {
        "wrong result: float16 attention: XLA accumulates the float16 matmuls in float32 and rounds once; the reference rounds every float16 step; they differ by 1 ulp (0.1%), beyond the test's rtol of 1e-3": (
            'test_attention_4d_causal_fp16',
            'test_attention_4d_gqa_with_past_and_present_fp16',
        ),
    },
}


def _table() -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = {"*": {}}
    for reason, names in _EVERYWHERE.items():
        table["*"].update(dict.fromkeys(names, reason))
    for backend, reasons in _PER_BACKEND.items():
        entries = table.setdefault(backend, {})
        for reason, names in reasons.items():
            entries.update(dict.fromkeys(names, reason))
    return table


XFAIL: dict[str, dict[str, str]] = _table()
