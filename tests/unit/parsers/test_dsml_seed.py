"""DeepSeek V3.2 (DSML) tool calls and Seed-OSS reasoning and tool calls, as those models write them."""

from __future__ import annotations

from .fixtures import TOOLS
from .helpers import views

DSML = ('I will search.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="search">\n'
        '<｜DSML｜parameter name="zip" string="true">007</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="n" string="false">5</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="q" string="false">{"a": [1, 2]}</｜DSML｜parameter>\n'
        '</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        '</｜DSML｜function_calls>')


def test_dsml_string_attribute_decides_verbatim_or_json():
    kw = {"reasoning": "deepseek_r1", "tool_calls": "deepseek_v32", "tools": TOOLS}
    assert views(kw, "Two lookups.</think>" + DSML) == [
        ("R", "Two lookups."), ("T", "I will search."),
        ("call", 0, "search", {"zip": "007", "n": 5, "q": {"a": [1, 2]}}),
        ("call", 1, "get_weather", {"city": "杭州"}),
    ]


def test_seed_oss_call_after_text():
    text = ("Let me check.\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</seed:tool_call>")
    assert views({"tool_calls": "seed_oss", "tools": TOOLS}, text) == [
        ("T", "Let me check."), ("call", 0, "get_weather", {"city": "Paris", "days": 3})
    ]


def test_seed_oss_reasoning_keeps_its_budget_notes_and_ends_before_the_call():
    note = "<seed:cot_budget_reflect>I have used 129 tokens, and there are 383 tokens remaining.</seed:cot_budget_reflect>"
    text = (f"<seed:think>The user wants Paris.\n{note}\nCall the tool.</seed:think>\n<seed:tool_call>\n"
            "<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>")
    assert views({"reasoning": "seed_oss", "tool_calls": "seed_oss", "tools": TOOLS}, text) == [
        ("R", f"The user wants Paris.\n{note}\nCall the tool."), ("call", 0, "get_weather", {"city": "Paris"})
    ]
    # without thinking the answer is text, and another family's <think> is not Seed's
    assert views({"reasoning": "seed_oss"}, "<think>x</think> Paris.") == [("T", "<think>x</think> Paris.")]
