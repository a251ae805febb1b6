"""and-operand: narrow a boolean ``and`` chain, e.g. ``if self.kv_cache_dtype in ("auto",
"fp8_e4m3") and is_deepseek_dsa:`` gains ``and compute_cap[0] >= 10``.

  locator.operands = ['self.kv_cache_dtype in ("auto", "fp8_e4m3")', "is_deepseek_dsa"]
  params.operand   = "compute_cap[0] >= 10"     what to add
  params.after     = "is_deepseek_dsa"          optional; default: at the end

or-operand's op on the other boolean operator (patchkit/core/ops/or_operand.py): the same
locator, the same chains (a parenthesised sub-chain stays one operand), the same goal.
"""

from __future__ import annotations

import libcst as cst

from patchkit.core.ops import register
from patchkit.core.ops.or_operand import OrOperand


@register("and-operand")
class AndOperand(OrOperand):
    OPERATOR = cst.And
    WORD = "and"
