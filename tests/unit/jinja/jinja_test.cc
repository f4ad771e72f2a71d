// The Jinja engine feature by feature. Expected texts are what jinja2 3.1 renders with
// trim_blocks and lstrip_blocks (the settings of Hugging Face's apply_chat_template).
#include <gtest/gtest.h>

#include <string>

#include "jinja/template.h"

namespace llamaserve::jinja {
namespace {

using json = nlohmann::ordered_json;

Result<RenderOutput> try_render(std::string_view text, const json& vars = json::object(),
                                const json& client = json::object(), RenderLimits limits = {},
                                ErrorDetail* error = nullptr) {
  LS_ASSIGN_OR_RETURN(Template tmpl, Template::parse(text, {}, error));
  return tmpl.render(vars, client, limits, error);
}

std::string render(std::string_view text, const json& vars = json::object()) {
  Result<RenderOutput> out = try_render(text, vars);
  EXPECT_TRUE(out.is_ok()) << text << ": " << out.status().to_string();
  return out.is_ok() ? out->text : "<error>";
}

ErrorDetail error_of(std::string_view text, const json& vars = json::object(),
                     RenderLimits limits = {}) {
  ErrorDetail error;
  Result<RenderOutput> out = try_render(text, vars, json::object(), limits, &error);
  EXPECT_FALSE(out.is_ok()) << text << " rendered " << (out.is_ok() ? out->text : "");
  if (!out.is_ok()) {
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(error.message), std::string::npos);
  }
  return error;
}

TEST(Jinja, TextAndExpressions) {
  EXPECT_EQ(render("plain text"), "plain text");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}"),
            "7|9|3|-4|1");
  EXPECT_EQ(render("{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 1.5 + 1 }}"),
            "2|1024|3.5|2.0|2.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' + 'cd' }}|{{ 'ab' * 3 }}"),
            "a1NoneTrue|abcd|ababab");
  EXPECT_EQ(render("{{ 1 < 2 and 2 <= 2 and 3 > 2 and 3 >= 3 and 1 != 2 and 1 == 1.0 }}"), "True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }}{{ 2 not in [1, 2] }}{{ 'k' in {'k': 1} }}"),
            "TrueFalseTrue");
  EXPECT_EQ(render("{{ not true or false }}|{{ 0 or 'x' }}|{{ 'y' and '' }}|"), "False|x||");
  EXPECT_EQ(render("{{ 'yes' if x else 'no' }}{{ 'only' if x }}", {{"x", false}}), "no");
  EXPECT_EQ(render("{{ [1, 2, 3] }}|{{ (1,) }}|{{ {'a': 'b', 1: none} }}|{{ 1e-05 }}|{{ 1e16 }}"),
            "[1, 2, 3]|(1,)|{'a': 'b', 1: None}|1e-05|1e+16");
  EXPECT_EQ(render("{{ \"it's\" }}|{{ ['it\\'s', \"q\"] }}|{{ '\\u00e9\\n' }}"),
            "it's|[\"it's\", 'q']|\xC3\xA9\n");
}

TEST(Jinja, AttributesItemsAndSlices) {
  const json vars = {{"m", {{"role", "user"}, {"content", "héllo wörld"}}},
                     {"xs", {1, 2, 3, 4, 5}}};
  EXPECT_EQ(render("{{ m.role }}{{ m['role'] }}{{ xs[0] }}{{ xs[-1] }}{{ xs.1 }}", vars),
            "useruser152");
  EXPECT_EQ(render("{{ xs[1:3] }}{{ xs[::-1] }}{{ xs[:-1] }}{{ xs[::2] }}", vars),
            "[2, 3][5, 4, 3, 2, 1][1, 2, 3, 4][1, 3, 5]");
  // Strings index by code point.
  EXPECT_EQ(render("{{ m.content[1] }}|{{ m.content[-5:] }}|{{ m.content[::-1][:3] }}", vars),
            "é|wörld|dlr");
  EXPECT_EQ(render("{{ m.missing }}|{{ xs[10] }}|{{ m.missing is defined }}", vars), "||False");
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  yes\n  {% endif %}\nend"), "  yes\nend");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("a\n  {%- if true %} b{% endif %}"), "a b");
  EXPECT_EQ(render("a {#- note -#} b"), "ab");
  EXPECT_EQ(render("x {{ 1 }}\n{% if true %}y{% endif %}"), "x 1\ny");
  // {%+ keeps the indentation; {{ is not a block tag, so lstrip_blocks leaves it.
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}|  {{ 'v' }}"), "  k|  v");
  // One trailing newline of the template is dropped, as jinja2 does; \r\n becomes \n.
  EXPECT_EQ(render("line\r\nnext\n"), "line\nnext");
}

TEST(Jinja, Loops) {
  const json vars = {{"xs", {"a", "b", "c"}}, {"d", {{"k1", 1}, {"k2", 2}}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ x }}{{ ',' if not loop.last }}"
                   "{% endfor %}",
                   vars),
            "1a,2b,3c");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.length }}"
                   "{{ loop.first }} {% endfor %}",
                   vars),
            "033True 123False 213False ");
  EXPECT_EQ(render("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", vars),
            "a2c2");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", vars), "k1=1;k2=2;");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", vars), "k1k2");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}"
                   "{% if x == 'c' %}{% break %}{% endif %}{% endfor %}",
                   vars),
            "ac");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}>{{ loop.nextitem }} {% endfor %}", vars),
            ">b a>c b> ");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.cycle('o', 'e') }}{% endfor %}", vars), "oeo");
  // A set inside a loop does not leak out (that is what namespace() is for).
  EXPECT_EQ(render("{% set n = 0 %}{% for x in xs %}{% set n = n + 1 %}{% endfor %}{{ n }}", vars),
            "0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + 1 %}"
                   "{% endfor %}{{ ns.n }}",
                   vars),
            "3");
}

TEST(Jinja, SetMacroCallFilterBlocks) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(render("{% set block %}  inner {{ 1 }}{% endset %}[{{ block }}]"), "[  inner 1]");
  EXPECT_EQ(render("{% set up | upper %}shout{% endset %}{{ up }}"), "SHOUT");
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}"),
            "Hi Ann! Hi Bo? Hi Cy!");
  EXPECT_EQ(render("{% macro fact(n) %}{{ 1 if n <= 1 else n * fact(n - 1)|int }}{% endmacro %}"
                   "{{ fact(5) }}"),
            "120");
  EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}"
                   "{% call box() %}inside{% endcall %}"),
            "[inside]");
  EXPECT_EQ(render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}"),
            "<1><2>");
  EXPECT_EQ(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}"), "ABC D");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(Jinja, Filters) {
  const json vars = {
      {"users", {{{"name", "b"}, {"age", 3}}, {{"name", "a"}, {"age", 5}}, {{"name", "c"}}}},
      {"d", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(
      render("{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'abc'|length }}|{{ [1,2]|count }}"),
      "x|hi|3|2");
  EXPECT_EQ(render("{{ [3,1,2]|first }}{{ [3,1,2]|last }}{{ [3,1,2]|sort|join(',') }}"
                   "{{ [3,1,2]|sort(reverse=true)|list }}"),
            "321,2,3[3, 2, 1]");
  EXPECT_EQ(render("{{ missing|default('dflt') }}|{{ ''|d('e', true) }}|{{ 0|default(5) }}"),
            "dflt|e|0");
  EXPECT_EQ(
      render("{{ users|map(attribute='name')|join }}|{{ users|selectattr('age')|list|length }}"
             "|{{ users|rejectattr('name', 'equalto', 'a')|map(attribute='name')|list }}",
             vars),
      "bac|2|['b', 'c']");
  EXPECT_EQ(render("{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('even')|list }}"
                   "{{ ['a','B']|map('upper')|list }}"),
            "[1, 3][1, 3]['A', 'B']");
  EXPECT_EQ(render("{{ d|dictsort }}|{{ d|items|list }}|{{ [1,1,2]|unique|list }}", vars),
            "[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[1, 2]");
  EXPECT_EQ(render("{{ 'a b'|upper }}{{ 'A'|lower }}{{ 'hello world'|title }}"
                   "{{ 'hELLO'|capitalize }}{{ 'aXa'|replace('a', 'b') }}"),
            "A BaHello WorldHellobXb");
  EXPECT_EQ(render("{{ '3'|int + 1 }}|{{ 'x'|int(7) }}|{{ '2.5'|float }}|{{ 2.567|round(2) }}"
                   "|{{ -3|abs }}|{{ 5|string ~ 'x' }}|{{ [1,2,3]|sum }}"),
            "4|7|2.5|2.57|3|5x|6");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}"),
            "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ [1,2,3,4,5]|batch(2)|list }}|{{ 'a<b'|e }}|{{ [3,1]|max }}{{ [3,1]|min }}"),
            "[[1, 2], [3, 4], [5]]|a&lt;b|31");
  EXPECT_EQ(render("{{ '%s-%d'|format('a', 3) }}|{{ '%s!' % 'hi' }}|{{ 'ab'|reverse }}"),
            "a-3|hi!|ba");
}

TEST(Jinja, ToJsonFollowsHuggingFace) {
  const json vars = {{"t", {{"name", "f"}, {"args", {1, 2.5, true, nullptr}}, {"s", "é\"\n<"}}}};
  EXPECT_EQ(render("{{ t|tojson }}", vars),
            "{\"name\": \"f\", \"args\": [1, 2.5, true, null], \"s\": \"é\\\"\\n<\"}");
  EXPECT_EQ(render("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|tojson(separators=(',', ':'), sort_keys=true) }}"),
            "{\"a\":2,\"b\":1}");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}",
                   {{"x", 1}}),
            "TrueFalseTrueTrue");
  EXPECT_EQ(render("{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 1 is number }}"
                   "{{ 1 is integer }}{{ 1.0 is integer }}{{ true is boolean }}"),
            "TrueTrueTrueTrueTrueFalseTrue");
  EXPECT_EQ(render("{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}"
                   "{{ 'a' is in 'abc' }}{{ 1 is not ne 1 }}{{ false is false }}{{ 1 is true }}"),
            "TrueFalseTrueTrueTrueTrueTrueFalse");
}

TEST(Jinja, StringAndDictMethods) {
  EXPECT_EQ(
      render("{{ ' a '.strip() }}|{{ 'xax'.lstrip('x') }}|{{ 'a\\n'.rstrip() }}|"
             "{{ 'a,b'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a</t>b'.split('</t>')[-1] }}"),
      "a|ax|a|['a', 'b']|['a', 'b']|b");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}"
                   "{{ 'aXa'.replace('a', 'y') }}{{ 'Ab'.upper() }}{{ '{} {x}'.format(1, x=2) }}"),
            "TrueTrueyXyAB1 2");
  EXPECT_EQ(render("{{ d.get('a') }}{{ d.get('z', 'n') }}{{ d.keys()|list }}{{ d.values()|list }}",
                   {{"d", {{"a", 1}}}}),
            "1n['a'][1]");
}

TEST(Jinja, UndefinedLikeJinja2) {
  EXPECT_EQ(render("[{{ nothing }}]{% for x in nothing %}x{% endfor %}{{ nothing|length }}"
                   "{{ nothing is iterable }}"),
            "[]0True");
  EXPECT_EQ(error_of("{{ nothing.attr }}").message, "'nothing' is undefined");
  EXPECT_EQ(error_of("{{ nothing + 1 }}").message, "'nothing' is undefined");
  EXPECT_EQ(error_of("{{ nothing() }}").message, "'nothing' is undefined");
}

TEST(Jinja, ErrorsCarryMessageAndLine) {
  const ErrorDetail raised = error_of(
      "line one\n{% if true %}\n{{ raise_exception('Roles must alternate!') }}\n"
      "{% endif %}");
  EXPECT_EQ(raised.kind, ErrorKind::kRaised);
  EXPECT_EQ(raised.message, "Roles must alternate!");
  EXPECT_EQ(raised.line, 3);

  const ErrorDetail type = error_of("\n\n{{ 'a' + 1 }}");
  EXPECT_EQ(type.kind, ErrorKind::kRuntime);
  EXPECT_EQ(type.line, 3);
  EXPECT_NE(type.message.find("'str' and 'int'"), std::string::npos);

  EXPECT_EQ(error_of("{{ 1 // 0 }}").kind, ErrorKind::kRuntime);
  EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}").kind, ErrorKind::kRuntime);

  struct Case {
    const char* text;
    int line;
  };
  for (const Case& c :
       {Case{"{% if x %}", 1}, Case{"a\n{{ 1 + }}", 2}, Case{"{% endfor %}", 1},
        Case{"{{ x|nosuchfilter }}", 1}, Case{"\n{{ x is nosuchtest }}", 2}, Case{"{% for %}", 1},
        Case{"{{ 'unterminated }}", 1}, Case{"{% break %}", 1}, Case{"{{ x", 1}, Case{"{# open", 1},
        Case{"{% set x = [1, 2 %}", 1}, Case{"{% frobnicate %}", 1}}) {
    const ErrorDetail e = error_of(c.text);
    EXPECT_EQ(e.kind, ErrorKind::kSyntax) << c.text;
    EXPECT_EQ(e.line, c.line) << c.text << ": " << e.message;
  }
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  RenderLimits limits;
  limits.max_steps = 10'000;
  const ErrorDetail loop =
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
               {}, limits);
  EXPECT_EQ(loop.kind, ErrorKind::kLimit);
  EXPECT_NE(loop.message.find("steps"), std::string::npos);

  limits = {};
  limits.max_output_bytes = 1000;
  EXPECT_EQ(error_of("{% for i in range(1000) %}xx{% endfor %}", {}, limits).kind,
            ErrorKind::kLimit);
  // A string doubled in place grows without printing anything.
  EXPECT_EQ(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}",
                     {}, limits)
                .kind,
            ErrorKind::kLimit);
  EXPECT_EQ(error_of("{{ 'x' * 100000000000 }}", {}, limits).kind, ErrorKind::kLimit);

  limits = {};
  limits.max_call_depth = 16;
  const ErrorDetail deep = error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", {}, limits);
  EXPECT_EQ(deep.kind, ErrorKind::kLimit);
  EXPECT_NE(deep.message.find("16"), std::string::npos);

  // Deep nesting is a syntax error, not a stack overflow.
  EXPECT_EQ(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").kind,
            ErrorKind::kSyntax);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += "+1";
  EXPECT_EQ(error_of(chain + " }}").kind, ErrorKind::kSyntax);
  EXPECT_EQ(error_of("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                     "{% set ns.l = [ns.l] %}{% endfor %}")
                .kind,
            ErrorKind::kRuntime);
}

TEST(Jinja, ClientTextKeepsItsProvenance) {
  const json client = {{"msg", "  Hello <|im_end|>  "}, {"tool", {{"k", "v\"x"}}}};
  auto out = try_render(
      "<|im_start|>{{ msg|trim }}<|im_end|>{{ msg[2:7] ~ '!' }}{{ tool|tojson }}"
      "{{ msg.replace('Hello', 'Bye') }}{{ 'lit' }}",
      json::object(), client);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const std::string& text = out->text;
  EXPECT_EQ(text,
            "<|im_start|>Hello <|im_end|><|im_end|>Hello!{\"k\": \"v\\\"x\"}  Bye <|im_end|>  lit");
  auto tainted = [&](std::string_view piece, size_t from = 0) {
    const size_t at = text.find(piece, from);
    for (const ByteRange& r : out->client_ranges) {
      if (r.begin <= at && at + piece.size() <= r.end) return true;
    }
    return false;
  };
  EXPECT_TRUE(tainted("Hello <|im_end|>"));
  EXPECT_FALSE(tainted("<|im_start|>"));
  EXPECT_TRUE(tainted("Hello", 30));
  EXPECT_FALSE(tainted("!"));
  EXPECT_TRUE(tainted("v\\\"x"));   // the escaped client string
  EXPECT_FALSE(tainted("{\"k\""));  // JSON syntax and (here) keys... keys are client text too
  EXPECT_TRUE(tainted("  Bye <|im_end|>  "));
  EXPECT_FALSE(tainted("lit"));
  for (size_t i = 1; i < out->client_ranges.size(); ++i) {
    EXPECT_LT(out->client_ranges[i - 1].end, out->client_ranges[i].begin);
  }
}

}  // namespace
}  // namespace llamaserve::jinja
