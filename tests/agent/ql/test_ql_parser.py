"""ELF QL lexer and parser: random valid queries (built as syntax trees by a grammar strategy)
print to text that parses back to the same tree; random text and random token soup never
raise anything but QLError; errors name the line, column and what was expected."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.ql import QLError, compile_query, parse
from agent.ql import nodes as n
from agent.ql.lexer import KEYWORDS, tokenize

# ---- a grammar strategy: syntax trees in the parser's normal form -------------------------
names = st.one_of(
    st.sampled_from(["product", "user", "location", "price", "x", "_y1", "order", "my field"]),
    st.text(string.ascii_lowercase + "_", min_size=1, max_size=6),
)
numbers = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9),
)
literals = st.one_of(numbers, st.text(max_size=8), st.booleans(), st.none()).map(
    lambda v: n.Literal(v)
)
fields = st.lists(names, min_size=1, max_size=3).map(lambda p: n.Field(tuple(p)))
leaves = st.one_of(literals, fields)


def _extend(children: st.SearchStrategy[n.Node]) -> st.SearchStrategy[n.Node]:
    string_lits = st.text(max_size=6).map(lambda v: n.Literal(v))
    return st.one_of(
        st.builds(n.Unary, st.sampled_from(["NOT", "-"]), children).filter(
            lambda u: not (u.op == "-" and isinstance(u.operand, n.Literal))
        ),
        st.builds(
            n.Binary,
            st.sampled_from(
                ["AND", "OR", "=", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"]
            ),
            children,
            children,
        ),
        st.builds(
            n.InList, children, st.lists(children, min_size=1, max_size=3).map(tuple), st.booleans()
        ),
        st.builds(
            n.Match, st.sampled_from(["LIKE", "RLIKE"]), children, string_lits, st.booleans()
        ),
        st.builds(n.IsNull, children, st.booleans()),
        st.builds(n.Between, children, children, children, st.booleans()),
        st.builds(
            n.Call,
            st.sampled_from(["lower", "substr", "count", "sum", "concat", "f", *_NEW_CALLS]),
            st.lists(children, max_size=3).map(tuple),
            st.booleans(),
        ),
        st.builds(n.Index, children, children),
        _issue26(children),
    )


@st.composite
def _issue26(draw: st.DrawFn, children: st.SearchStrategy[n.Node]) -> n.Node:
    """Issue 26's syntax: CASE (both forms), CAST, and new functions with plausible arguments
    (one composite: ``children`` appears once in the strategy's repr, which hypothesis
    builds)."""
    which = draw(st.sampled_from(["case", "cast", "date_trunc", "string"]))
    if which == "case":
        op = draw(st.one_of(st.none(), children))
        branches = draw(st.lists(st.tuples(children, children), min_size=1, max_size=3))
        default = draw(st.one_of(st.none(), children))
        return n.Case(op, tuple(w for w, _ in branches), tuple(r for _, r in branches), default)
    if which == "cast":
        return n.Cast(draw(children), draw(st.sampled_from(sorted(set(n.CAST_TYPES.values())))))
    if which == "date_trunc":
        unit = draw(st.sampled_from(["minute", "hour", "day", "week", "month", "year", "bad"]))
        return n.Call("date_trunc", (n.Literal(unit), draw(children)))
    name = draw(st.sampled_from(["starts_with", "ends_with", "contains", "url_extract_parameter"]))
    return n.Call(name, (draw(children), n.Literal(draw(st.text(max_size=6)))))


# function names of issue 26 (``cast`` is syntax, not a call: ``n.Cast``)
_NEW_CALLS = ["if", "nullif", "from_unixtime", "url_extract_path", "date_trunc", "contains"]


exprs = st.recursive(leaves, _extend, max_leaves=6)
count_star = st.just(n.Call("count", (n.Star(),)))
windows = st.one_of(
    st.none(),
    st.builds(n.Window, st.integers(1, 3600).map(float), st.none()),
    st.builds(n.Window, st.integers(2, 3600).map(float), st.integers(1, 60).map(float)),
)
queries = st.builds(
    n.Query,
    select=st.lists(
        st.builds(n.SelectItem, st.one_of(exprs, count_star), st.one_of(st.none(), names)),
        min_size=1,
        max_size=3,
    ).map(tuple),
    inputs=st.lists(names, max_size=2).map(tuple),
    where=st.one_of(st.none(), exprs),
    group_by=st.lists(exprs, max_size=2).map(tuple),
    having=st.one_of(st.none(), exprs),
    order_by=st.lists(st.builds(n.OrderItem, exprs, st.booleans()), max_size=2).map(tuple),
    limit=st.one_of(st.none(), st.integers(1, 10**6)),
    window=windows,
    mode=st.sampled_from([None, "SYNC", "ASYNC"]),
    partitions=st.one_of(st.none(), st.integers(1, 64)),
    emit=st.sampled_from([None, "FINAL", "CHANGES"]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries)
def test_printed_queries_parse_back_to_the_same_tree(q: n.Query) -> None:
    text = q.to_sql()
    back = parse(text)
    assert back == q, text
    assert back.to_sql() == text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_random_text_raises_only_qlerror(text: str) -> None:
    try:
        compile_query(text)
    except QLError as exc:
        assert exc.line >= 1 and exc.column >= 1


VOCAB = [
    *sorted(KEYWORDS),
    *["=", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "(", ")", ",", ".", "[", "]", ";"],
    "count(*)",
    "x",
    "user.location",
    "'a'",
    "'%b_'",
    "3",
    "2.5",
    "lower(x)",
    "sum(x)",
    "topk(x, 2)",
    "regexp_extract(x, '(a)', 1)",
    "split(x, ',')[0]",
    "30 s",
    "EMIT",
    "FINAL",
    "changes",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(VOCAB), max_size=25))
def test_token_soup_raises_only_qlerror(words: list[str]) -> None:
    for text in (" ".join(words), "SELECT count(*) AS n FROM t " + " ".join(words)):
        try:
            q = compile_query(text)
        except QLError as exc:
            assert exc.line >= 1 and exc.column >= 1
        else:
            assert q.map({"x": "a,b", "user": {"location": "de"}}) is not None


# ---- lexer ---------------------------------------------------------------------------------
def test_keywords_are_case_insensitive_and_comments_skipped() -> None:
    a = parse(
        "select Product, COUNT(*) as N from Clicks -- a comment\n where A = 'x' group by Product"
    )
    b = parse("SELECT Product, count(*) AS N FROM Clicks WHERE A = 'x' GROUP BY Product")
    assert a == b
    assert a.select[0].expr == n.Field(("Product",))  # identifiers keep their case


def test_string_escapes_and_numbers() -> None:
    toks = tokenize(r"'it''s' 'a\'b' 'tab\t\\n' 'x\u00e9' '\.' 12 1.5 .5 1e3 2E-2")
    values = [t.value for t in toks[:-1]]
    assert values == ["it's", "a'b", "tab\t\\n", "xé", "\\.", 12, 1.5, 0.5, 1000.0, 0.02]
    assert toks[-1].kind == "EOF"


def test_quoted_identifiers_and_dotted_paths() -> None:
    q = parse("SELECT `order`.`my field`, count(*) AS n FROM t GROUP BY `order`.`my field`")
    assert q.select[0].expr == n.Field(("order", "my field"))


# ---- error positions ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("SELECT product\nFORM clicks", 2, 1, "expected ',' or FROM, got 'FORM'"),
        (
            "SELECT product, count(*) AS n\nFROM clicks\nGROUP product",
            3,
            7,
            "expected BY after GROUP, got 'product'",
        ),
        (
            "SELECT a, count(*) AS n FROM t\nGROUP BY a\nFORM x",
            3,
            1,
            "expected ',', HAVING, ORDER BY, LIMIT, WINDOW, MODE, PARTITIONS, EMIT, ';' or end of "
            "query, got 'FORM'",
        ),
        ("SELECT count(*) AS n FROM t WHERE a = ", 1, 39, "expected an expression"),
        ("SELECT count(*) AS n FROM t LIMIT 0", 1, 35, "expected a positive integer after LIMIT"),
        ("SELECT count(*) AS n FROM t LIMIT 2.5", 1, 35, "positive integer after LIMIT"),
        ("SELECT count(*) AS n FROM t WHERE a = 'x", 1, 39, "expected a closing '"),
        ("SELECT count(*) AS n FROM t WHERE a ~ 1", 1, 37, "unexpected character '~'"),
        ("SELECT count(*) AS n FROM t WINDOW 30 parsecs", 1, 39, "expected a time unit"),
        ("SELECT count(*) AS n FROM t MODE FAST", 1, 34, "expected SYNC or ASYNC"),
        ("SELECT count(*) AS n FROM t WHERE x IN (1, 2", 1, 45, "expected ',' or ')'"),
        ("SELECT count(*) AS n FROM t;\nSELECT", 2, 1, "expected end of query after ';'"),
        ("SELECT a AS FROM t", 1, 13, "expected a column name after AS"),
    ],
)
def test_syntax_errors_say_where_and_what(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(QLError) as info:
        compile_query(text)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.line, err.column) == (line, column), str(err)
    assert fragment in str(err)
    assert str(err).startswith(f"line {line}, column {column}: ")


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    for text in (
        "SELECT count(*) AS n FROM t WHERE " + "(" * 500 + "a" + ")" * 500 + " = 1",
        "SELECT count(*) AS n FROM t WHERE " + " + ".join(["a"] * 1000) + " > 1",
        "SELECT count(*) AS n FROM t WHERE " + "NOT " * 1000 + "a",
        "SELECT count(*) AS n FROM t WHERE " + "- " * 1000 + "a > 1",
    ):
        with pytest.raises(QLError, match="nested at most"):
            compile_query(text)
