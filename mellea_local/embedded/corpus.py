"""The text the embedded tokenizer is trained on.

The tokenizer decides how many tokens every prompt costs, so the corpus is shaped by what the
package actually sends to the embedded model: chat turns in English, capitals and numbers,
JSON and tool-call JSON, the ReACT tools' words, and above all the requirement-check
instruction, which runs once per check and should cost as few tokens as possible. Everything
here is plain Python data and a seeded generator, so the corpus (and the tokenizer trained on
it) is identical on every machine and every run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

# The public requirement-check instruction (io.yaml `instruction`, a `str.format` template:
# doubled braces are literal braces). Kept verbatim so its words become single tokens.
REQUIREMENT_INSTRUCTION = (
    "<requirements>: {requirement}\n"
    "Please verify if the assistant's generation satisfies the user's requirements or not and "
    'reply with a binary label accordingly. Respond with a json {{"score": "yes"}} if the '
    'constraints are satisfied or respond with {{"score": "no"}} if the constraints are not '
    "satisfied."
)

# The six requirement families the embedded adapters are trained on (exact phrasings).
REQUIREMENT_PHRASINGS = (
    "The response is written in all capital letters.",
    "The response mentions {word}.",
    "The response is at most {n} words long.",
    "The response contains a number.",
    "The response ends with a question mark.",
    "The response is valid JSON.",
)

# Role names appear right after `<|start_of_role|>`, i.e. with no leading space.
ROLE_NAMES = ("system", "user", "assistant", "available_tools", "tool_response")


def _words(text: str) -> list[str]:
    return text.split()


_FUNCTION_WORDS = _words(
    """
a an the this that these those it its it's he she they them their there here we us our you your
i me my mine yours his her hers who whom whose which what when where why how whether if then
else than so because since while until unless although though after before during about above
across against along among around at by down for from in inside into near of off on onto out
outside over past through to toward under up upon with within without and or but nor not no
yes is are was were be been being am do does did done doing have has had having can could may
might must shall should will would all any both each every few many more most much none one
other some such only own same just also too very again ever never always often sometimes now
today tomorrow yesterday soon later already still yet perhaps maybe please thanks thank hello
hi goodbye bye okay ok sure well even ago almost enough quite rather really
"""
)

_NOUNS = _words(
    """
time year day week month hour minute second night morning evening afternoon people person man
woman child children boy girl family friend mother father sister brother parent baby name way
thing world life hand part place case point group number problem fact question answer word line
story book page letter list table chart map picture image photo sound voice music song movie game
team player sport ball goal score match race car bus train plane ship boat bike road street
city town village country state nation capital river lake sea ocean island mountain hill forest
tree flower grass garden park field farm house home room door window wall floor roof kitchen
school class student teacher lesson test exam office company business market shop store price
money bank job work worker manager doctor nurse hospital police law court government party war
peace history science math physics chemistry biology language english french german spanish
computer phone screen keyboard mouse program code software data file folder system network
internet website email message model tool function result value key item object array string
integer float boolean error warning request response reply output input check requirement rule
task step plan idea reason example method process result report summary detail option choice
water food bread rice meat fish egg milk cheese apple banana orange grape lemon cake tea coffee
juice sugar salt dog cat bird horse cow sheep pig mouse lion tiger bear wolf fox rabbit snake
sun moon star sky cloud rain snow wind storm weather temperature degree color shape size length
weight height width speed distance energy power light heat fire air earth stone metal gold
silver iron wood paper glass plastic cloth shirt shoe hat coat dress bag box cup glass bottle
plate knife spoon fork chair bed desk lamp clock watch key lock gift card ticket
north south east west left right top bottom middle center side front back end start beginning
calculator lookup search expression sum difference product quotient remainder total average
"""
)

_VERBS = _words(
    """
be have do say get make go know take see come think look want give use find tell ask work seem
feel try leave call need become keep let begin show hear play run move live believe bring
happen write provide sit stand lose pay meet include continue set learn change lead understand
watch follow stop create speak read allow add spend grow open walk win offer remember love
consider appear buy wait serve die send expect build stay fall cut reach kill remain suggest
raise pass sell require report decide pull return explain hope develop carry break receive
agree support hit produce eat cover catch draw choose cause point listen enjoy sing dance swim
fly drive ride climb jump cook clean wash close count multiply divide subtract compute
calculate verify validate check parse format answer respond print store load save delete
update insert select sort filter convert translate describe summarize list compare measure
said got made went knew took saw came thought looked wanted gave used found told asked worked
felt tried left called needed became kept began showed heard played ran moved lived believed
wrote sat stood lost paid met learned changed understood followed stopped created spoke added
says gets makes goes knows takes sees comes thinks looks wants gives uses finds tells asks
works feels tries calls needs keeps shows plays runs moves lives writes reads adds returns
contains mentions ends starts begins satisfies includes means equals matches
going getting making taking seeing coming thinking looking using finding working trying
calling running writing reading adding checking answering calculating
"""
)

_ADJECTIVES = _words(
    """
good new first last long great little own other old right big high different small large next
early young important few public bad same able best better sure free true false full special
easy clear recent late hard major real whole simple short strong possible low black white red
blue green yellow orange purple pink brown gray grey dark bright light hot cold warm cool wet dry
sunny rainy cloudy windy snowy happy sad angry calm quiet loud fast slow quick heavy soft rich
poor cheap expensive safe dangerous clean dirty empty open closed correct wrong valid invalid
capital lowercase uppercase final total exact equal even odd positive negative single double
famous popular beautiful ugly nice kind friendly funny strange interesting boring useful
helpful careful ready busy tired hungry thirsty sick healthy alive dead round square flat deep
wide narrow tall thick thin sweet sour bitter fresh ancient modern local global
"""
)

_ADVERBS_MISC = _words(
    """
quickly slowly carefully easily clearly exactly really finally usually probably certainly
simply nearly actually together away forward backward instead therefore however first second
third fourth fifth sixth seventh eighth ninth tenth hundred thousand million billion half
zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
plus minus times divided percent dozen pair monday tuesday wednesday thursday friday saturday
sunday january february march april may june july august september october november december
spring summer autumn winter
"""
)

_NAMES = _words(
    """
alice bob carol dave emma frank grace henry ivy jack kate leo mia noah olivia paul quinn rose
sam tom uma victor wendy xavier yara zoe anna ben chloe daniel ella felix george hannah isaac
julia liam lucy max nina oscar peter ruby sara theo
"""
)

# (country, capital) pairs: the embedded model answers capital questions.
CAPITALS = (
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Portugal", "Lisbon"),
    ("England", "London"),
    ("Ireland", "Dublin"),
    ("Scotland", "Edinburgh"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"),
    ("Poland", "Warsaw"),
    ("Austria", "Vienna"),
    ("Greece", "Athens"),
    ("Hungary", "Budapest"),
    ("Netherlands", "Amsterdam"),
    ("Belgium", "Brussels"),
    ("Switzerland", "Bern"),
    ("Russia", "Moscow"),
    ("Ukraine", "Kyiv"),
    ("Turkey", "Ankara"),
    ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"),
    ("Nigeria", "Abuja"),
    ("Morocco", "Rabat"),
    ("Ghana", "Accra"),
    ("Japan", "Tokyo"),
    ("China", "Beijing"),
    ("Korea", "Seoul"),
    ("India", "Delhi"),
    ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"),
    ("Indonesia", "Jakarta"),
    ("Australia", "Canberra"),
    ("Canada", "Ottawa"),
    ("Mexico", "Mexico City"),
    ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"),
    ("Chile", "Santiago"),
    ("Peru", "Lima"),
    ("Colombia", "Bogota"),
    ("Cuba", "Havana"),
    ("Iran", "Tehran"),
    ("Iraq", "Baghdad"),
    ("Israel", "Jerusalem"),
    ("Pakistan", "Islamabad"),
    ("Nepal", "Kathmandu"),
    ("Philippines", "Manila"),
    ("Malaysia", "Kuala Lumpur"),
)

# The ReACT tools of the embedded model, as JSON-schema function specs.
TOOL_SPECS = (
    {
        "name": "calculator",
        "description": "Evaluate an integer arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 3 * (4 + 5)"}},
            "required": ["expression"],
        },
    },
    {
        "name": "lookup",
        "description": "Look up the value stored under a key.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string", "description": "The key to look up."}},
            "required": ["key"],
        },
    },
    {
        "name": "final_answer",
        "description": "Give the final answer to the user.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer."}},
            "required": ["answer"],
        },
    },
    {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
)

_CHAT_LINES = (
    "Hello! How can I help you today?",
    "You are a helpful assistant.",
    "You are a helpful assistant that answers in short sentences.",
    "You are a ReACT agent. Think step by step, call a tool when you need one, "
    "and finish by calling final_answer.",
    "Answer the question in one word.",
    "Answer in JSON.",
    "Thanks! Is there anything else I can help you with?",
    "I am not sure, but I think the answer is yes.",
    "Let me think step by step.",
    "I should call the calculator tool.",
    "I should look up the value first.",
    "The tool says the answer is",
    "The user asks a question. I will answer it.",
    "Sorry, I do not know.",
)

WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(_FUNCTION_WORDS + _NOUNS + _VERBS + _ADJECTIVES + _ADVERBS_MISC + _NAMES)
)


def requirement_check_text(requirement: str) -> str:
    """The user-turn text of one requirement check, as the io.yaml instruction renders it."""
    return REQUIREMENT_INSTRUCTION.format(requirement=requirement)


def _requirement(rng: random.Random) -> str:
    phrasing = rng.choice(REQUIREMENT_PHRASINGS)
    word = rng.choice(WORDS + tuple(c for pair in CAPITALS for c in pair))
    return phrasing.format(word=word, n=rng.randint(1, 12))


def _cased(rng: random.Random, text: str) -> str:
    """Vary the casing like the embedded model's answers do (the all-caps family needs it)."""
    r = rng.random()
    if r < 0.2:
        return text.upper()
    if r < 0.65:
        return text[:1].upper() + text[1:] + rng.choice(".....?!")
    return text


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14)))


def _json_value(rng: random.Random, depth: int = 0) -> object:
    r = rng.random()
    if r < 0.3:
        return rng.randint(-50, 2000)
    if r < 0.55:
        return rng.choice(WORDS)
    if r < 0.65:
        return rng.choice([True, False, None])
    if r < 0.75:
        return round(rng.uniform(-100, 100), rng.randint(1, 3))
    if r < 0.85 or depth > 1:
        return _sentence(rng)
    if r < 0.93:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(WORDS): _json_value(rng, depth + 1) for _ in range(rng.randint(1, 3))}


def _arith(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(0, 999), rng.randint(0, 99)
    op = rng.choice("+-*")
    expression = f"{a} {op} {b}"
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return expression, value


def _tool_call(rng: random.Random) -> dict[str, object]:
    kind = rng.randrange(4)
    if kind == 0:
        arguments: dict[str, object] = {"expression": _arith(rng)[0]}
        name = "calculator"
    elif kind == 1:
        arguments, name = {"key": rng.choice(WORDS)}, "lookup"
    elif kind == 2:
        answer = str(rng.choice([rng.randint(0, 9999), *WORDS]))
        arguments, name = {"answer": answer}, "final_answer"
    else:
        arguments, name = {"city": rng.choice(CAPITALS)[1]}, "get_weather"
    return {"name": name, "arguments": arguments}


def _dialogue(rng: random.Random) -> Iterator[str]:
    """Question/answer pairs the embedded model is later trained on."""
    country, capital = rng.choice(CAPITALS)
    yield f"What is the capital of {country}?"
    yield _cased(rng, f"the capital of {country} is {capital}")
    yield capital
    expression, value = _arith(rng)
    yield f"What is {expression}?"
    yield f"{expression} = {value}"
    yield f"The answer is {value}."
    word = rng.choice(WORDS)
    yield f"How many letters are in the word {word}?"
    yield f"The word {word} has {len(word)} letters."
    yield _cased(rng, _sentence(rng))
    yield _cased(rng, _sentence(rng)) + "?"


def corpus_lines(seed: int = 0) -> list[str]:
    """Every training line, in a fixed order; the same list for the same seed, everywhere."""
    rng = random.Random(seed)
    lines: list[str] = []
    lines += [role for role in ROLE_NAMES for _ in range(200)] + list(_CHAT_LINES) * 20
    # Every word in every casing, with and without a leading space (the start of a turn).
    for word in WORDS:
        lines += [word, f"{word} {word.capitalize()} {word.upper()}", word.capitalize()]
    for country, capital in CAPITALS:
        lines += [f"{country} {capital}", f"{country.upper()} {capital.upper()}", capital]
        lines += [f"{country.lower()} {capital.lower()}"] * 10
    lines += [_cased(rng, _sentence(rng)) for _ in range(12000)]
    for _ in range(2500):
        lines += list(_dialogue(rng))
    for _ in range(2500):
        obj = {rng.choice(WORDS): _json_value(rng) for _ in range(rng.randint(1, 4))}
        lines.append(json.dumps(obj))
    for _ in range(2500):
        call = json.dumps(_tool_call(rng))
        lines += [call, f"<tool_call>{call}</tool_call>"]
        expression, value = _arith(rng)
        lines += [str(value), f"I need to compute {expression}. I will call the calculator."]
    for spec in TOOL_SPECS:
        lines += [json.dumps(spec)] * 20
    # The requirement check: instruction and phrasings many times, so each word is one token.
    for phrasing in REQUIREMENT_PHRASINGS:
        lines += [phrasing] * 20
    for _ in range(600):
        lines.append(requirement_check_text(_requirement(rng)))
    for score in ("yes", "no"):
        lines += [json.dumps({"score": score})] * 100
    lines.append("0123456789 +-*/=()[]{}<>.,;:!?'\"_#@$%&|\\^~`")
    lines.append("ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz")
    return lines
