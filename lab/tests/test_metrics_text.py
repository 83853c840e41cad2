"""The speculation counters read from a /metrics page by prometheus_client's text parser: what a
line-by-line regex got wrong (a `}` or an escaped quote in a label value, _created samples) is read as
Prometheus's text format defines it, and a page that is not that format is an error, not zeros."""

from __future__ import annotations

import pytest
from sparkserve_lab.speculative import metrics

from sparkserve.errors import SparkserveError

PAGE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="a}b \\"quoted\\""} 7.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="a}b \\"quoted\\""} 1.7e9
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 100.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0"} 5.0
vllm:spec_decode_num_accepted_tokens_total{engine="1"} 6.0
"""


def test_label_values_with_braces_and_quotes_and_created_samples() -> None:
    c = metrics.parse(PAGE)
    # the _created timestamp and the per-position counter are not the drafts or the accepted tokens
    assert (c.drafts, c.draft_tokens, c.accepted) == (7.0, 0.0, 11.0)


@pytest.mark.parametrize("page", ["vllm:spec_decode_num_drafts_total{engine=\"0\" 3\n",
                                  "vllm:spec_decode_num_drafts_total abc\n"])
def test_a_page_that_is_not_prometheus_text_is_an_error(page: str) -> None:
    with pytest.raises(SparkserveError, match="not Prometheus text format"):
        metrics.parse(page)
