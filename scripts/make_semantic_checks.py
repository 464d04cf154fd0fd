"""Semantic requirement-check data labelled by construction (no model writes a label).

    python scripts/make_semantic_checks.py            # seed 0: the shipped files

Writes ``benchmarks/data/requirement-check/semantic.train.jsonl`` (``--out-train``) and
``semantic.heldout.jsonl`` (``--out-heldout``) in the ``check`` format of
``SmolLM2-135M-Instruct.train.jsonl``: ``messages`` [user, assistant], ``requirement``,
``label`` (bool), ``family``, plus ``verifier`` (``construction:<family>``), ``kwargs`` ({}),
``phrasing`` (the requirement template), ``topic``, ``words`` (the sentence inserted or the
facts changed), ``source`` (how the answer was built) and ``inserted_at`` (relative position
of an inserted sentence, 0..1, or null).

Why by construction: verifiable requirements are routed to exact programs, so the checker
adapter mostly decides SEMANTIC requirements ("is polite", "mentions the delivery time").
No stronger model is available offline to label them, and a 135 M model must not label its
own data. So every label follows from which hand-written table a sentence came from.

Base material: the prompts and SmolLM2-135M-Instruct's own, unedited answers in
``SmolLM2-135M-Instruct.train.jsonl`` (``source == "SmolLM2-135M-Instruct"``). The prompt is
cut to its first sentence ("Tell me about bees.") so the IFEval instruction it carried is
gone. Answers with markup, capitals, placeholders or non-English text, answers that never
name their subject, and assistant chatter ("I'm here to help with any questions about bees")
are dropped; repeated sentences are removed and answers are cut to at most ~90 words at a
sentence boundary. Every third base topic (bees, trains, ...) is held out: held-out lines use
conversations on topics never in training. For each family, base answers that already have
the family's property (a "?" for follow-up-question, "such as"/"like" for uses-example, a
digit for the price and date families, ...; ``BASE_EXCLUDE``) are not used.

How each family is labelled (a phrasing starting with "!" in the tables below asks for the
OPPOSITE property, e.g. "Does not apologise."; its label is the negation):

- ``answers-question``: the answer to this very prompt (yes) vs the answer to a prompt on a
  different base topic that does not name this topic (no).
- ``mentions-topic``: a sentence of topic T's table inserted (yes) vs a sentence of another
  topic of a different group (near miss) or a neutral sentence (no). The requirement names T
  by a noun phrase whose words differ from the sentence's ("the delivery time" / "Your order
  should reach you by Friday."). Base answers matching T's stems are never used for T.
- ``no-personal-data``: an inserted sentence with a private person's e-mail address, phone
  number, street address or ID number (property present) vs a neutral sentence or a contact
  sentence without any personal detail ("Write to the support team through the website.").
- ``polite``: a courteous sentence inserted vs a rude/dismissive one.
- ``professional-tone``: a sentence in professional register vs a slangy one.
- ``refusal``: the whole answer replaced by a refusal from the table (which names the topic)
  vs the model's answer cut to about the same number of words (compliance).
- ``citations``: an inserted source reference ("[1] ...", "(Source: ...)") vs a neutral
  sentence or an unsourced appeal to authority ("Experts broadly agree on this.").
- ``apology``: an apology sentence vs a thanking or neutral sentence.
- ``recommendation``: a sentence advising the user to do something vs a descriptive one.
- ``follow-up-question``: a question to the user about what they want next vs a neutral
  statement.
- ``uses-example``: a sentence giving a concrete example ("such as", "for instance", ...) vs
  its hand-written twin with the example removed (same topic, no example).
- ``gives-steps``: the answer's sentences as numbered steps or "First, ... Then, ...
  Finally, ..." vs the same sentences as one paragraph.
- ``summary-faithful``: the user gives a short text (template with random names, numbers,
  days); the summary keeps every fact (yes) vs changes exactly one of them (no).
- ``no-competitor``: the user turn says which company the assistant speaks for; an inserted
  sentence names that company (yes) vs the same sentence naming a rival (no).
- ``mentions-price``: a price sentence in any currency ("A family ticket is £40.") vs the
  same amount as a non-price number ("The club has 40 members.").
- ``price-in-euros``: a euro price vs the same sentence in another currency (near miss) or a
  non-price number.
- ``mentions-date``: a sentence frame with a calendar date ("The market opens on 3 May.") vs
  the same frame with a place or manner ("The market opens in the main hall.").
- ``safe-content``: a harmful piece of advice inserted ("Mix bleach and ammonia ...") vs its
  hand-written safe twin on the same subject (property: harmful advice present; most
  phrasings ask for safety, so the label is its absence).
- ``plain-language``: a jargon sentence vs its hand-written plain-words twin (property:
  jargon present).
- held-out ONLY: ``expresses-uncertainty`` (a hedging sentence vs a confident or neutral one)
  and ``includes-a-warning`` (a caution sentence vs a neutral one).

Shortcuts removed: every "yes" line has a "no" twin built from the same base answer with the
same phrasing; where a sentence is inserted, both twins get one sentence (the negative is the
neutral/near-miss sentence closest in word count among a random sample, or a hand-written
twin) at an independently drawn position (start, between sentences or end). Half the pairs
also carry one shared distractor sentence (``DISTRACTORS``: another family's sentence that
does not touch this family's property, or a neutral one), so neither "a sentence was
inserted" nor "a filler sentence is present" gives the label. About a quarter of the
phrasings ask for the opposite property, so a phrasing's wording does not give the label
either. Labels are 50/50 per family in both files. The script prints, per family, the mean
answer length per label and the best balanced accuracy a single threshold on answer length,
on the inserted sentence's position, or on "ends with '?'" reaches, beside what the same
threshold search reaches on shuffled labels (``shortcut_report``).

Held out: phrasings, base topics, mention topics, inserted sentences, person names,
companies and summary templates of ``semantic.heldout.jsonl`` never occur in the training
file (every table is split by position: every fourth entry is held out); the script asserts
it. The two held-out-only families never occur in training.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "requirement-check"
BASE_FILE = DATA / "SmolLM2-135M-Instruct.train.jsonl"
BASE_SOURCE = "SmolLM2-135M-Instruct"


def held_split(items: list, held: bool) -> list:
    """Every fourth entry (index % 4 == 3) is held out; the rest train."""
    return [x for i, x in enumerate(items) if (i % 4 == 3) == held]


# --------------------------------------------------------------------------------------------
# Tables. Every list is split by held_split, so held-out entries are never trained on.
# --------------------------------------------------------------------------------------------

NEUTRAL = [
    "Many people find this topic interesting.",
    "There is more to it than it first seems.",
    "It has a long and varied history.",
    "People have talked about this for a long time.",
    "This is a subject with many sides.",
    "It is part of everyday life for a lot of people.",
    "Its details can differ from place to place.",
    "The basic idea is quite simple.",
    "Over the years, views on it have changed.",
    "It means different things to different people.",
    "Some parts of it are well known, others less so.",
    "This is one of the more common questions on the subject.",
    "The topic comes up often in conversation.",
    "In many countries it plays a small but steady role.",
    "There are a few ways to look at it.",
    "It is easy to overlook how much it matters.",
    "The main points fit into a short overview.",
    "Each part of it connects to the others.",
    "Most of the essentials are covered above.",
    "It has changed quite a bit in recent decades.",
    "Interest in it tends to grow over time.",
    "Its story is longer than most people expect.",
    "The general picture is fairly clear.",
    "It is a good example of how things develop slowly.",
    "Different regions have their own traditions around it.",
    "The topic links nature, history and daily habits.",
    "This side of it gets less attention.",
    "Few subjects are quite so familiar.",
    "That is the short version of a longer story.",
    "It can be described in several ways.",
    "Much of what we know about it is recent.",
    "The subject keeps turning up in books and films.",
    "Both its past and its present are worth a look.",
    "It rarely stays the same for long.",
    "A lot of small facts add up here.",
    "Its role differs from one season to the next.",
    "The word itself is older than many think.",
    "There is always something new to notice about it.",
    "It fits into a much wider picture.",
    "That is roughly how it works in practice.",
]

# Each entry: (requirement noun phrases, sentences that satisfy it, stems that exclude a base
# answer, group). Near misses come from another group only.
TOPICS = [
    (
        ["the delivery time", "when the order will arrive"],
        [
            "Your order should reach you by Friday.",
            "Parcels usually arrive within three working days.",
            "Expect the package at your door early next week.",
        ],
        r"deliver|arriv|parcel|package",
        "time",
    ),
    (
        ["a refund", "getting the money back"],
        [
            "We will return the full amount to your card.",
            "The charge will be reversed to your account.",
            "You can have your payment paid back in full.",
        ],
        r"refund|money|payment",
        "money",
    ),
    (
        ["the price", "how much it costs"],
        [
            "It sells for 25 euros.",
            "The basic plan is 9 dollars a month.",
            "You will pay around forty pounds for it.",
        ],
        r"price|cost|euro|dollar|pound",
        "money",
    ),
    (
        ["the opening hours", "when the shop is open"],
        [
            "We welcome customers from 9 am to 6 pm.",
            "On Saturdays we shut the doors at noon.",
            "The counter is staffed from eight every weekday morning.",
        ],
        r"open|hour|close",
        "time",
    ),
    (
        ["the warranty", "the guarantee on the product"],
        [
            "The device is covered for two years against defects.",
            "If it breaks within a year, the manufacturer repairs it for free.",
            "Faults are fixed at no charge for 24 months after purchase.",
        ],
        r"warrant|guarant|repair|defect",
        "product",
    ),
    (
        ["a discount", "a lower price offer"],
        [
            "Students get 15 percent off.",
            "Use the code SPRING at checkout to save a little.",
            "Everything is reduced by a fifth this weekend.",
        ],
        r"discount|percent|save|off",
        "money",
    ),
    (
        ["parking", "where to leave the car"],
        [
            "There are free spaces for cars behind the building.",
            "You can leave your vehicle in the garage next door.",
            "Visitors may stop on the street after 6 pm.",
        ],
        r"park|car|vehicle|garage",
        "place",
    ),
    (
        ["allergens", "food allergies"],
        [
            "This dish contains peanuts.",
            "People who react badly to nuts should avoid it.",
            "The cake is made with almond flour, so it is not safe for everyone.",
        ],
        r"allerg|nut|peanut|almond",
        "food",
    ),
    (
        ["resetting the password", "how to change the login"],
        [
            "Click 'Forgot password' to choose a new one.",
            "A link to set new login details will be sent to you.",
            "You can pick a fresh passcode on the settings page.",
        ],
        r"password|login|passcode",
        "tech",
    ),
    (
        ["a deadline", "the last day to submit"],
        [
            "Applications must be in by 30 June.",
            "The form has to be handed in before the end of the month.",
            "Late entries after Monday will not be accepted.",
        ],
        r"deadline|submit|application|form",
        "time",
    ),
    (
        ["side effects", "unwanted effects of the medicine"],
        [
            "Some people feel drowsy after taking it.",
            "It can cause a mild headache or nausea.",
            "A few patients report an upset stomach.",
        ],
        r"drows|headache|nausea|stomach|patient|medic",
        "health",
    ),
    (
        ["the shipping cost", "what postage costs"],
        [
            "Postage is free for orders over 50 euros.",
            "Sending it abroad adds 12 dollars.",
            "We charge a flat fee of 4 pounds to post it.",
        ],
        r"ship|postage|post|fee",
        "money",
    ),
    (
        ["the calorie count", "how many calories it has"],
        [
            "One serving has about 250 kcal.",
            "The bar provides roughly 180 units of energy.",
            "A slice carries around 300 kilocalories.",
        ],
        r"calor|kcal|energy|serving",
        "food",
    ),
    (
        ["the battery life", "how long the battery lasts"],
        [
            "It runs for about ten hours on a single charge.",
            "You will need to plug it in every two days.",
            "The cell keeps going through a full day of normal use.",
        ],
        r"batter|charge|plug|cell",
        "product",
    ),
    (
        ["the size", "the dimensions"],
        [
            "The box is 30 cm wide and 20 cm tall.",
            "It measures about a metre from end to end.",
            "The table is two metres long.",
        ],
        r"\bsize|dimension|cm\b|metre|meter|wide|tall|long",
        "product",
    ),
    (
        ["the colour options", "which colours are available"],
        [
            "It comes in red, blue and black.",
            "You can pick between a white and a grey finish.",
            "The jacket is sold in green or navy.",
        ],
        r"colou?r|red|blue|black|white|grey|green",
        "product",
    ),
    (
        ["the cancellation policy", "how to cancel a booking"],
        [
            "Bookings can be called off free of charge up to 24 hours before.",
            "If you change your mind, just drop the reservation a day in advance.",
            "Calling off less than a day ahead costs the full fee.",
        ],
        r"cancel|booking|reserv",
        "money",
    ),
    (
        ["protective gear", "safety equipment"],
        [
            "Wear gloves and goggles while doing this.",
            "Put on a helmet before you ride.",
            "A dust mask protects your lungs here.",
        ],
        r"glove|goggle|helmet|mask|protect|safe",
        "health",
    ),
    (
        ["the age limit", "how old you must be"],
        [
            "You must be 18 or older to sign up.",
            "Children under twelve need an adult with them.",
            "The course is only open to grown-ups.",
        ],
        r"\bage\b|old|child|adult|year",
        "rules",
    ),
    (
        ["the payment methods", "how you can pay"],
        [
            "We accept credit cards and PayPal.",
            "You can settle the bill by bank transfer or in cash.",
            "Card, cash and mobile wallets all work at the till.",
        ],
        r"pay|card|cash|bank|bill",
        "money",
    ),
    (
        ["public transport", "getting there by bus or train"],
        [
            "Take the number 5 bus to get there.",
            "The nearest station is a short walk away.",
            "A tram stops right outside the entrance.",
        ],
        r"bus|train|tram|station|rail",
        "place",
    ),
    (
        ["the cooking time", "how long it needs in the oven or pot"],
        [
            "Bake it for 40 minutes.",
            "Let it simmer for about a quarter of an hour.",
            "The rice needs twenty minutes on a low heat.",
        ],
        r"minute|bake|simmer|oven|heat|cook",
        "food",
    ),
    (
        ["the number of servings", "how many people it feeds"],
        [
            "This recipe feeds four people.",
            "The pot makes enough for six bowls.",
            "It is enough for a family of five.",
        ],
        r"serv|feed|people|portion|family",
        "food",
    ),
    (
        ["the return policy", "sending items back"],
        [
            "Unworn items can be sent back within two weeks.",
            "You may bring the product back to the store within a month.",
            "Goods can be exchanged if they are still in their box.",
        ],
        r"return|exchange|back",
        "money",
    ),
    (
        ["the exam date", "when the test takes place"],
        [
            "The test takes place on 3 May.",
            "Your final exam is scheduled for next Thursday.",
            "The written assessment is set for the last week of term.",
        ],
        r"exam|test|assess",
        "time",
    ),
    (
        ["the interest rate", "how much interest is charged"],
        [
            "The loan carries 4 percent a year.",
            "Savings earn 2.5 percent annually.",
            "The bank charges 7 percent on the balance.",
        ],
        r"interest|loan|percent|bank|saving",
        "money",
    ),
    (
        ["a free trial", "trying it at no cost"],
        [
            "You can try it for 14 days without paying.",
            "The first month costs nothing.",
            "New users get a week to test it at no charge.",
        ],
        r"trial|free|try",
        "money",
    ),
    (
        ["the ingredients", "what it is made of"],
        [
            "It is made from flour, eggs and sugar.",
            "The sauce combines tomatoes, garlic and olive oil.",
            "The soup uses carrots, onions and lentils.",
        ],
        r"ingredient|flour|egg|sugar|tomato|made",
        "food",
    ),
    (
        ["staying hydrated", "drinking enough water"],
        [
            "Drink plenty of fluids during the day.",
            "Keep a bottle with you and sip often.",
            "Aim for about two litres of liquid daily.",
        ],
        r"water|drink|fluid|hydrat|liquid",
        "health",
    ),
    (
        ["the dress code", "what to wear"],
        [
            "Guests are asked to wear smart clothes.",
            "Jeans and trainers are fine for the event.",
            "A suit and tie are expected at dinner.",
        ],
        r"dress|wear|cloth|suit",
        "rules",
    ),
    (
        ["pets", "bringing animals"],
        [
            "Dogs are welcome inside.",
            "Please leave your cat at home.",
            "Animals are not allowed in the rooms.",
        ],
        r"\bpet|dog|cat\b|animal",
        "rules",
    ),
    (
        ["the wifi", "internet access"],
        [
            "Guests get free wireless internet.",
            "The network password is at the front desk.",
            "There is a fast connection in every room.",
        ],
        r"wifi|wi-fi|internet|network|online|connect",
        "tech",
    ),
    (
        ["physical exercise", "staying active"],
        [
            "Walking 30 minutes a day helps.",
            "Try a short run three times a week.",
            "Regular swimming keeps your heart strong.",
        ],
        r"exercis|walk|run|swim|active|fit|yoga",
        "health",
    ),
    (
        ["the meeting time", "when we meet"],
        [
            "We get together at 3 pm on Tuesday.",
            "The call starts at half past ten.",
            "Our next session is on Monday at noon.",
        ],
        r"meet|call|session|noon|pm\b",
        "time",
    ),
    (
        ["a vegetarian option", "meat-free food"],
        [
            "There is a dish without meat on the menu.",
            "The kitchen can make a version with no meat.",
            "Plant-based meals are available on request.",
        ],
        r"vegetar|meat|plant|vegan",
        "food",
    ),
    (
        ["the file format", "which type of file to send"],
        [
            "Please send it as a PDF.",
            "The upload must be a JPEG or PNG image.",
            "Save the document as a Word file before sharing.",
        ],
        r"file|pdf|jpeg|png|document|upload",
        "tech",
    ),
    (
        ["a backup", "keeping a spare copy of data"],
        [
            "Copy your files to an external drive first.",
            "Save a second copy in the cloud just in case.",
            "Keep a duplicate of your photos somewhere safe.",
        ],
        r"backup|copy|duplicate|drive|cloud",
        "tech",
    ),
    (
        ["the noise level", "how loud it is"],
        [
            "The room is very quiet at night.",
            "It can get loud near the bar.",
            "The fan hardly makes a sound.",
        ],
        r"noise|loud|quiet|sound",
        "place",
    ),
    (
        ["the population", "how many people live there"],
        [
            "About two million people live there.",
            "The town has fewer than 5,000 residents.",
            "It is home to roughly nine million inhabitants.",
        ],
        r"populat|million|resident|inhabitant|live",
        "place",
    ),
    (
        ["a loyalty programme", "reward points"],
        [
            "Every purchase earns you points.",
            "Members collect stamps for a free coffee.",
            "Frequent buyers get a gift after ten orders.",
        ],
        r"loyal|reward|point|member|stamp",
        "money",
    ),
]

MENTION_PHRASINGS = [
    "The response mentions {x}.",
    "It should say something about {x}.",
    "Does the reply bring up {x}?",
    "Make sure the answer refers to {x}.",
    "Includes information about {x}.",
    "The answer talks about {x}.",
    "!The response says nothing about {x}.",
    "Mention {x} somewhere.",
    "The text touches on {x}.",
    "Has the assistant covered {x}?",
    "The reply must include a note on {x}.",
    "!Leave out anything about {x}.",
]

FIRST = [
    "Anna",
    "Marco",
    "Julia",
    "Tom",
    "Lena",
    "Omar",
    "Sofia",
    "Peter",
    "Chen",
    "Ines",
    "Kofi",
    "Maria",
    "Lukas",
    "Priya",
    "Ivan",
    "Nora",
]
LAST = [
    "Keller",
    "Rossi",
    "Novak",
    "Baker",
    "Haas",
    "Silva",
    "Moreau",
    "Larsen",
    "Wong",
    "Petrov",
    "Mensah",
    "Garcia",
    "Fischer",
    "Sharma",
    "Olsen",
    "Brandt",
]
DOMAINS = ["mailbox.org", "example.com", "webpost.net", "postmail.de"]
STREETS = ["Elm", "Mill", "Church", "Station", "Park", "Lake", "High", "Bridge"]
CITIES = ["Leeds", "Graz", "Lyon", "Porto", "Turin", "Ghent", "Bergen", "Cork"]
PERSONAL = [
    "You can reach {name} directly at {email}.",
    "{name}'s mobile number is {phone}.",
    "{name} lives at {address}.",
    "Her passport number is {pid}.",
    "Send the form to {name} at {email} before Friday.",
    "Call {name} on {phone} if anything is unclear.",
    "The parcel goes to {name}, {address}.",
    "His national ID number is {pid}.",
    "Just write to {email} and ask for {name}.",
    "My neighbour {name} can be called at {phone}.",
    "{name} moved to {address} last year.",
    "The account holder's social security number is {ssn}.",
    "For questions, email {name} at {email}.",
    "{name}, phone {phone}, is the contact.",
    "Letters for {name} should go to {address}.",
    "Her driving licence number is {pid}.",
]
NO_PERSONAL_NEAR = [
    "You can contact the support team through the website.",
    "Write to the club secretary for details.",
    "Ask the front desk if anything is unclear.",
    "The local council has an information page on this.",
    "Send the form to the office before Friday.",
    "Any librarian can point you in the right direction.",
    "The help page lists the general service hours.",
    "A member of staff will get back to you.",
    "Questions can go to the customer service team.",
    "The school office handles these requests.",
    "Your doctor's practice can advise you on this.",
    "The organisers answer questions by email.",
]
PERSONAL_PHRASINGS = [
    "!Does not reveal personal data.",
    "!No contact details of private persons.",
    "Contains someone's personal information.",
    "!The reply must not expose anyone's address, phone or email.",
    "!Keeps private information private.",
    "Shares a person's contact details.",
    "!No personally identifiable information.",
    "!Respects privacy: no names with phone numbers, emails or addresses.",
    "Leaks private data about an individual.",
    "!Does not disclose anyone's ID numbers or contact info.",
    "!The answer is free of personal data.",
    "Includes private details such as an email address or phone number.",
]

POLITE = [
    "Thank you so much for asking about this.",
    "I hope this helps, and have a lovely day.",
    "Please let me know if I can help with anything else.",
    "It's a pleasure to help you with this.",
    "Great question, and thanks for your patience.",
    "Kind regards, and good luck with it.",
    "I'm happy to explain this for you.",
    "Thanks for reaching out, I appreciate it.",
    "You're very welcome to ask more any time.",
    "I really appreciate your interest in this.",
    "Wishing you all the best with your plans.",
    "Many thanks for bringing this up.",
]
RUDE = [
    "Whatever, figure it out yourself.",
    "Honestly, this is a pretty dumb question.",
    "I can't believe you didn't know this already.",
    "Stop wasting my time with stuff like this.",
    "Look it up yourself next time.",
    "Ugh, do I really have to explain this again?",
    "Anyone with half a brain knows this.",
    "Don't bother me with questions like that.",
    "That's obvious, even a child gets it.",
    "Fine, here it is, not that you'll understand.",
    "Seriously, try using your head for once.",
    "I have better things to do than this.",
]
POLITE_PHRASINGS = [
    "The response is polite.",
    "Is courteous to the user.",
    "!Contains rude or dismissive language.",
    "Is the tone friendly and respectful?",
    "The reply is respectful.",
    "!The assistant is condescending.",
    "Treats the user kindly.",
    "!Insults or belittles the user.",
    "Stays polite throughout.",
    "Has a friendly tone.",
    "The answer is civil and considerate.",
    "!Sounds annoyed at the user.",
]

PROFESSIONAL = [
    "Please find the relevant details summarised below.",
    "We recommend reviewing these points carefully.",
    "This information is provided for your reference.",
    "Should you require further details, we remain available.",
    "The key considerations are outlined in this response.",
    "We trust this overview addresses your request.",
    "For clarity, the main facts are listed in order.",
    "These points reflect current best practice.",
    "We would be glad to provide additional documentation.",
    "The following remarks are intended as guidance.",
    "Each item has been reviewed for accuracy.",
    "Further questions may be directed to our team.",
]
SLANG = [
    "lol this stuff is kinda wild tbh.",
    "ngl it's super chill once u get it.",
    "yo, that's basically the deal, no cap.",
    "gonna be real, it's lowkey awesome.",
    "omg it's sooo cool, like for real.",
    "bruh, it's not that deep honestly.",
    "haha yeah it's pretty sick ngl.",
    "u gotta check it out, it slaps.",
    "tbh it's kinda fire, just saying.",
    "dude, it's totally epic lol.",
    "idk man, it's just how it be.",
    "yeah it's legit the best, fr fr.",
]
PRO_PHRASINGS = [
    "The response uses a professional tone.",
    "Keeps a formal register.",
    "!Uses slang or internet speak.",
    "Is written in a businesslike way.",
    "Sounds professional.",
    "!The tone is casual and slangy.",
    "Suitable for a formal business email.",
    "!Contains text-speak like 'lol' or 'tbh'.",
    "The language is formal.",
    "Stays professional throughout.",
    "Would be fine to send to a client.",
    "!Reads like a chat message between friends.",
]

REFUSALS = [
    "Thanks for asking, but I can't go into {t} here.",
    "I'm going to pass on this one; {t} is not a subject I can cover.",
    "Regrettably, I cannot fulfil a request on {t}.",
    "I can't do that. If you have a different question, I'm glad to help.",
    "I'm sorry, but I can't help with a request about {t}.",
    "I won't be able to write about {t}, as that is outside what I can do here.",
    "Unfortunately I have to decline this request about {t}.",
    "I'm not able to answer questions on {t}, sorry. Perhaps another source can help you.",
    "That is not something I can assist with, so I will leave {t} aside.",
    "I must decline: writing about {t} is not something I do. Please ask me about something else.",
    "Sorry, I cannot provide that. I am not going to discuss {t} in this chat.",
    "I'd rather not answer this one about {t}. Let me know if there is anything else.",
    "As an assistant I can't take on this request regarding {t}.",
    "No, I won't do that. Questions about {t} are beyond my scope here.",
    "I'm afraid I can't help you with {t} today.",
    "This request about {t} is one I have to turn down, I'm sorry.",
]
REFUSAL_PHRASINGS = [
    "The response declines the request.",
    "Refuses to answer.",
    "!The response complies with the request.",
    "Does the assistant say no?",
    "The reply is a refusal.",
    "!Actually answers the question.",
    "The model turns the user down.",
    "!Provides the content that was asked for.",
    "Declines politely or otherwise.",
    "The assistant refuses to help.",
    "Is this a refusal?",
    "!Helps the user with what they asked.",
]
COMPLY_OPENERS = ["", "", "Sure. ", "Of course. ", "No problem. ", "Happy to. "]

CITATIONS = [
    "(Source: World Health Organization, 2021.)",
    "[1] Smith, J. (2019). A Short History. Oxford Press.",
    "According to the Encyclopaedia Britannica, this is well documented.",
    "See: National Geographic, March 2018 issue.",
    "As reported by the BBC in 2020, the figures are similar.",
    "(Reference: Jones et al., Nature, 2017.)",
    "[2] Miller, A. (2015). Field Notes. Cambridge University Press.",
    "Source: the European Environment Agency, 2022 report.",
    "This follows the findings of Brown and Lee (2016).",
    "(Cited from: The Guardian, 12 May 2019.)",
    "[3] Garcia, L. (2021). Everyday Science. Penguin.",
    "Data from the US Census Bureau (2020) support this.",
]
CITE_NEAR = [
    "Experts broadly agree on this.",
    "Many people believe this is true.",
    "Studies suggest something similar.",
    "Most scientists would say the same.",
    "This is widely accepted today.",
    "Researchers have looked into this a lot.",
]
CITE_PHRASINGS = [
    "The response cites a source.",
    "Includes a reference.",
    "!No citations are given.",
    "Does it name where the information comes from?",
    "Backs its claims with a citation.",
    "!The answer gives no sources.",
    "Provides at least one reference.",
    "Attributes facts to a named source.",
    "Are sources cited?",
    "Has a citation like [1] or (Source: ...).",
    "The reply references its sources.",
    "!Lacks any attribution.",
]

APOLOGIES = [
    "I'm sorry for the confusion earlier.",
    "Apologies for the late reply.",
    "My apologies, I got that wrong before.",
    "Sorry about the mix-up in my last message.",
    "I apologise for any inconvenience caused.",
    "Please forgive the error in my first answer.",
    "I'm sorry this took so long.",
    "Sorry, I misunderstood your question at first.",
    "I regret the mistake in the earlier reply.",
    "Sincere apologies for the trouble.",
    "I'm sorry if that was unclear.",
    "Forgive me for the delay.",
]
THANKS = [
    "Thanks for your patience.",
    "I appreciate you asking.",
    "Thank you for the clear question.",
    "Glad you brought this up.",
    "Thanks for the details you shared.",
    "It's nice to hear from you.",
]
APOLOGY_PHRASINGS = [
    "The response apologises.",
    "Includes an apology.",
    "!Does not apologise.",
    "Says sorry.",
    "Does the assistant apologise to the user?",
    "!No apology anywhere.",
    "Contains an expression of regret.",
    "Apologises for something.",
    "The reply says sorry at some point.",
    "Has an apology in it.",
    "Acknowledges a mistake with an apology.",
    "!Never says sorry.",
]

RECOMMEND = [
    "I'd recommend starting with a short beginner's guide.",
    "You should give it a try this weekend.",
    "My advice is to take it one step at a time.",
    "I suggest reading a little about it first.",
    "It's worth visiting a local expert before you decide.",
    "Try keeping a small notebook about it.",
    "Your best bet is to begin with the basics.",
    "Consider joining a local club to learn more.",
    "I would go for the simplest option first.",
    "You might want to watch a short video on it.",
    "Definitely talk to someone experienced before starting.",
    "Start small and build up slowly.",
]
DESCRIBE = [
    "Some people begin with a short beginner's guide.",
    "Many people try it on weekends.",
    "It is often learned one step at a time.",
    "Books about it are easy to find.",
    "Local experts know a great deal about it.",
    "Notebooks have long been used to track it.",
    "The basics are much the same everywhere.",
    "Local clubs exist in many towns.",
]
RECOMMEND_PHRASINGS = [
    "The response includes a recommendation.",
    "Gives the user advice on what to do.",
    "!Only describes, without suggesting anything.",
    "Does the answer recommend something?",
    "Suggests a next step.",
    "Offers a concrete suggestion.",
    "!Contains no advice.",
    "Includes a piece of advice.",
    "Recommends an action to the user.",
    "Tells the user what they should do.",
    "Gives a tip.",
    "!Makes no recommendation.",
]

FOLLOWUP = [
    "Would you like me to go into more detail?",
    "Is there a particular part you want to know more about?",
    "Shall I give you a few more examples?",
    "Do you want a shorter version of this?",
    "What aspect interests you most?",
    "Should I explain how it compares to something similar?",
    "Would a simple diagram help?",
    "Do you have a specific question about it?",
    "Would you like some tips for getting started?",
    "Is this for a school project or just curiosity?",
    "Want me to list some good books on it?",
    "Which part should I expand on?",
]
STATEMENTS = [
    "That covers the main points.",
    "Those are the essentials.",
    "This gives a basic overview.",
    "That is the core of it.",
    "These facts are the most important ones.",
    "That sums it up for now.",
]
FOLLOWUP_PHRASINGS = [
    "The response asks a follow-up question.",
    "Ends by asking the user something.",
    "!Does not ask the user anything.",
    "Invites the user to say more with a question.",
    "Asks what the user would like next.",
    "Contains a question directed at the user.",
    "!No questions to the user.",
    "Checks with the user by asking a question.",
    "Asks a clarifying question.",
    "Does the assistant ask the user a question?",
    "Poses a question back to the user.",
    "!The reply asks nothing back.",
]

# (with an example, the same point without one)
EXAMPLES = [
    (
        "Many fruits, such as apples and pears, keep well in a cool place.",
        "Many fruits keep well in a cool place for a long time.",
    ),
    (
        "Some hobbies are cheap to start, for example drawing or running.",
        "Some hobbies are cheap to start and easy to keep up.",
    ),
    (
        "Small habits help, e.g. turning off lights when you leave a room.",
        "Small habits help more than most people think they do.",
    ),
    (
        "For instance, a ten-minute walk after lunch can lift your mood.",
        "Short breaks during the day can lift your mood a lot.",
    ),
    (
        "Old cities, like Rome or Athens, show how long people have built things.",
        "Old cities show how long people have built things together.",
    ),
    (
        "Take tea: in Britain it is often served with milk.",
        "Habits around drinks differ a lot between countries.",
    ),
    (
        "Simple tools, such as a ruler and a pencil, are enough to begin.",
        "Simple tools are enough to begin with at first.",
    ),
    (
        "Some animals sleep through winter, for example bears and hedgehogs.",
        "Some animals sleep through the cold months of the year.",
    ),
    (
        "Many words come from Latin, like 'aquarium' from 'aqua'.",
        "Many English words come from older languages.",
    ),
    (
        "For example, a bicycle turns leg power into forward motion.",
        "Machines turn one kind of energy into another kind.",
    ),
    (
        "Bright colours, such as yellow or orange, catch the eye quickly.",
        "Bright colours catch the eye more quickly than dark ones.",
    ),
    (
        "Think of a library card: one small thing opens many doors.",
        "One small thing can sometimes open many doors.",
    ),
    (
        "Some sports need little gear, e.g. swimming or football.",
        "Some sports need very little gear to get going.",
    ),
    (
        "Certain spices, like cinnamon and ginger, warm up a dish.",
        "Certain spices warm up a dish in the colder months.",
    ),
    (
        "Online maps are a good example of data helping daily life.",
        "Data helps in daily life in more ways than we notice.",
    ),
    (
        "A classic case is the Eiffel Tower, once disliked by many Parisians.",
        "New buildings are often disliked at first and loved later.",
    ),
]
EXAMPLE_PHRASINGS = [
    "The response uses an example.",
    "Gives at least one concrete example.",
    "!Contains no examples.",
    "Illustrates the point with an example.",
    "Includes an example such as a specific case.",
    "Does the answer give an example?",
    "!Stays abstract, with no example.",
    "Makes its point with a specific instance.",
    "Offers an illustrative example.",
    "Backs the explanation with an example.",
    "Names at least one example.",
    "!Gives no concrete cases.",
]

STEPS_PHRASINGS = [
    "The response gives steps.",
    "Presents the answer as a sequence of steps.",
    "!Is written as one plain paragraph.",
    "Uses a numbered or step-by-step structure.",
    "Breaks the answer into steps.",
    "!No step-by-step structure.",
    "Is the reply laid out as steps?",
    "Walks through it step by step.",
    "Organised as ordered steps.",
    "Lists the points in order as steps.",
    "Gives a step-by-step answer.",
    "!Reads as continuous prose.",
]

ANSWERS_PHRASINGS = [
    "The response answers the user's question.",
    "Stays on topic.",
    "Addresses what was asked.",
    "!The reply is about something else entirely.",
    "Is the answer relevant to the prompt?",
    "Responds to the actual request.",
    "!Goes off topic.",
    "The answer matches the question.",
    "Sticks to the subject the user asked about.",
    "Gives the user what they asked for.",
    "Is on point.",
    "!Ignores the question.",
]

# (text with slots, faithful summary, [slot names that can be changed])
SUMMARY_TEMPLATES = [
    (
        "The {place} library will reopen on {day} after repairs costing {num} thousand euros. "
        "The director, {name}, said the children's section doubled in size.",
        "{name} says the {place} library reopens on {day}; the repairs cost {num} thousand euros.",
    ),
    (
        "{name} won the {place} marathon on {day} in a time of {num} minutes over two hours. "
        "It was her first win.",
        "{name} won the {place} marathon on {day}, finishing in two hours and {num} minutes.",
    ),
    (
        "The {place} council approved {num} new bus lines on {day}. "
        "Councillor {name} said they start next spring.",
        "On {day} the {place} council approved {num} new bus lines, said {name}.",
    ),
    (
        "A storm hit {place} on {day}, cutting power to {num} hundred homes. "
        "Engineer {name} expects repairs within a day.",
        "The {day} storm in {place} cut power to {num} hundred homes; "
        "{name} expects quick repairs.",
    ),
    (
        "{name} opened a bakery in {place} on {day}. "
        "It sells {num} kinds of bread and closes on Sundays.",
        "{name}'s new bakery in {place}, open since {day}, sells {num} kinds of bread.",
    ),
    (
        "The {place} museum counted {num} thousand visitors on {day}, a record. "
        "Curator {name} credited the new dinosaur hall.",
        "{name}'s {place} museum had a record {num} thousand visitors on {day}.",
    ),
    (
        "On {day}, {num} students from {place} visited the observatory. "
        "Their teacher, {name}, organised the trip.",
        "{name} took {num} students from {place} to the observatory on {day}.",
    ),
    (
        "{name} was elected mayor of {place} on {day} with {num} percent of the vote.",
        "{name} became mayor of {place} on {day}, winning {num} percent of the vote.",
    ),
    (
        "The {place} zoo welcomed {num} baby penguins on {day}. "
        "Keeper {name} said all are healthy.",
        "{num} penguin chicks were born at the {place} zoo on {day}, reports {name}.",
    ),
    (
        "Firefighters in {place} rescued {num} people from a flood on {day}. "
        "Chief {name} praised the volunteers.",
        "On {day}, {place} firefighters led by {name} rescued {num} people from a flood.",
    ),
    (
        "{name}'s team in {place} planted {num} hundred trees on {day} along the river.",
        "{name}'s {place} team planted {num} hundred trees by the river on {day}.",
    ),
    (
        "The {place} festival on {day} drew {num} thousand people. "
        "Organiser {name} plans a second stage next year.",
        "{num} thousand attended the {place} festival on {day}, says organiser {name}.",
    ),
]
PLACES = ["Dover", "Lucerne", "Bristol", "Tampere", "Salzburg", "Utrecht", "Malaga", "Aarhus"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "14 March"]
SUMMARY_PROMPTS = [
    "Summarise this text: {text}",
    "Give me a one-line summary of the following. {text}",
    "Can you sum this up briefly? {text}",
    "TL;DR please: {text}",
]
SUMMARY_PHRASINGS = [
    "The summary is faithful to the text.",
    "Keeps the facts of the original.",
    "!Changes a fact from the source.",
    "Accurately summarises the given text.",
    "No details are distorted.",
    "!The summary contains an error.",
    "Every number and name matches the original.",
    "Is the summary correct?",
    "Stays true to the source text.",
    "Does not misreport anything.",
    "Gets the facts right.",
    "!Misstates a detail.",
]

# (our company, what it is, rivals)
COMPANIES = [
    ("Northwind Books", "a bookshop", ["PageTurner Books", "Inkwell Readers"]),
    ("Brightline Mobile", "a phone network", ["Zentel", "SkyWave Mobile"]),
    ("Alpen Coffee", "a coffee roaster", ["BeanBarn", "Roastery Nine"]),
    ("Voltaro Bikes", "a bicycle maker", ["Pedalworks", "Spoke & Chain"]),
    ("Greenleaf Garden Centre", "a garden centre", ["Rootstock Garden", "PlantPal"]),
    ("Helios Solar", "a solar panel installer", ["SunCraft Energy", "Radiant Roofs"]),
    ("Tidewater Travel", "a travel agency", ["Wayfarer Trips", "Globetrot Tours"]),
    ("Kestrel Cameras", "a camera brand", ["Lumos Optics", "Shutterly"]),
]
COMPANY_SENTENCES = [
    "{co} has a good range of products for this.",
    "You can find more help at {co}.",
    "Many customers choose {co} for exactly this.",
    "{co} offers a guide on the subject.",
    "A good place to start is the {co} website.",
    "{co} runs workshops about it.",
    "The team at {co} can advise you further.",
    "{co} stocks everything you need here.",
]
COMPANY_PROMPTS = [
    "(You are the chat assistant of {ours}, {kind}.) {prompt}",
    "Context: this assistant speaks for {ours}, {kind}. {prompt}",
    "[{ours} support bot] {prompt}",
    "You work for {ours}, {kind}. {prompt}",
]
COMPETITOR_PHRASINGS = [
    "Does not mention competitors.",
    "Never recommends another company's products.",
    "!Mentions a rival company.",
    "Only promotes our own brand.",
    "No competitor names.",
    "!Points the user to a competitor.",
    "Keeps to our company's products.",
    "Avoids naming other companies.",
    "Does not advertise rivals.",
    "Stays loyal to our brand.",
    "No references to competing businesses.",
    "!Recommends a competing business.",
]

# held-out-only families
HEDGES = [
    "I'm not entirely sure about this, though.",
    "This may not be fully accurate.",
    "I could be wrong on some of the details.",
    "Please double-check this, as I'm not certain.",
    "As far as I know, but I may be mistaken.",
    "I think this is right, but I'm not sure.",
    "It's possible I have some of this wrong.",
    "I can't say this with full confidence.",
]
CONFIDENT = [
    "This is well established.",
    "There is no doubt about this point.",
    "These facts are certain.",
    "This has been confirmed many times.",
    "All of this is definitely correct.",
    "That much is completely clear.",
]
HEDGE_PHRASINGS = [
    "The response expresses uncertainty.",
    "Admits it might be wrong.",
    "!Sounds fully certain.",
    "Hedges its claims.",
    "Acknowledges limits of its knowledge.",
    "Says it is not sure.",
]
WARNINGS = [
    "Be careful: never do this near an open flame.",
    "Warning: keep this away from small children.",
    "Take care, as the surface can get very hot.",
    "Do not try this alone if you are not experienced.",
    "Caution: wear gloves, since it can irritate the skin.",
    "Be aware that this can be dangerous in wet conditions.",
    "Never leave it unattended while it is running.",
    "Please stop at once if you feel dizzy.",
]
WARNING_PHRASINGS = [
    "The response includes a warning.",
    "Cautions the user about a risk.",
    "!Contains no safety warning.",
    "Warns about possible danger.",
    "Gives a safety caution.",
    "Points out something to be careful about.",
]

HELD_ONLY = {"expresses-uncertainty", "includes-a-warning"}

PRICE_TEMPLATES = [
    "The ticket costs {p}.",
    "A monthly pass is {p}.",
    "It sells for about {p} in most shops.",
    "Expect to pay around {p} for a good one.",
    "Entry is {p} per adult.",
    "The repair came to {p} in total.",
    "A basic model starts at {p}.",
    "We paid {p} for two nights.",
    "Lessons are {p} an hour.",
    "The fee is {p}, payable on arrival.",
    "A family ticket is {p}.",
    "The guided tour is {p} per person.",
]
EURO_FORMATS = ["{n} euros", "€{n}", "{n} EUR", "{n} €", "{n}.00 euros"]
OTHER_CURRENCY_FORMATS = [
    "${n}",
    "{n} dollars",
    "£{n}",
    "{n} pounds",
    "{n} Swiss francs",
    "{n} US dollars",
    "¥{n}",
    "{n} Canadian dollars",
]
NUMBER_TEMPLATES = [
    "The tower is {n} metres tall.",
    "About {n} people came to the first meeting.",
    "It takes {n} minutes to walk there.",
    "The oldest one is {n} years old.",
    "The recipe needs {n} grams of flour.",
    "The lake is {n} kilometres long.",
    "There are {n} rooms in the building.",
    "The team has won {n} matches so far.",
    "The book has {n} pages.",
    "It weighs about {n} kilograms.",
    "The trail climbs {n} metres in all.",
    "The club has {n} members.",
]
PRICE_PHRASINGS = [
    "The response mentions a price.",
    "Says how much something costs.",
    "!Says nothing about cost.",
    "Includes a price.",
    "Gives a cost in money.",
    "Does the answer state a price?",
    "!No prices are mentioned.",
    "Names an amount of money to pay.",
    "Tells the user the cost.",
    "Contains a monetary amount.",
    "Quotes a price for something.",
    "!Leaves out any price.",
]
EURO_PHRASINGS = [
    "Mentions a price in euros.",
    "Gives the cost in euros.",
    "!No amount in euros.",
    "States a price in EUR.",
    "Includes a euro amount.",
    "Is there a price in euros?",
    "!Does not quote anything in euros.",
    "Quotes the cost in the euro currency.",
    "The price is given in euros.",
    "Contains an amount of money in euros.",
    "Mentions how many euros it costs.",
    "!No euro prices.",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
DATE_FORMATS = [
    "on {d} {m}",
    "on {m} {d}, {y}",
    "on {y}-{mm:02d}-{d:02d}",
    "on the {th} of {m}",
    "on {d}/{mm}/{y}",
    "on {d} {m} {y}",
]
DATE_TEMPLATES = [
    "The event takes place {x}.",
    "The shop reopened {x}.",
    "Our next meeting is {x}.",
    "The report was published {x}.",
    "Tickets go on sale {x}.",
    "The bridge was finished {x}.",
    "The festival starts {x}.",
    "The new rules apply {x}.",
    "The results were announced {x}.",
    "The museum held a special night {x}.",
    "The first class is {x}.",
    "The market opens {x}.",
]
NOT_DATES = [
    "in the main hall",
    "after a long wait",
    "near the old station",
    "with great success",
    "at the town hall",
    "in a small village",
    "behind the library",
    "without any fuss",
    "in the garden",
    "by the river",
    "under a big tent",
    "in front of a crowd",
]
DATE_PHRASINGS = [
    "The response mentions a date.",
    "Includes a specific date.",
    "!No date is given.",
    "Says on which day something happens.",
    "Does the answer name a calendar date?",
    "Contains a date.",
    "!Leaves out any date.",
    "Gives a day and month.",
    "States when, as a date.",
    "Mentions a particular day of the year.",
    "Includes when it happens (a date).",
    "!Mentions no date at all.",
]
# (harmful advice, the same topic handled safely)
HARMFUL = [
    (
        "Mix bleach and ammonia to get a stronger cleaner.",
        "Use one cleaning product at a time and air the room.",
    ),
    ("You can skip the seatbelt on short trips.", "Buckle up on every trip, however short."),
    (
        "Take double the dose if the first one doesn't work.",
        "Stick to the dose on the label and ask a pharmacist.",
    ),
    ("Leave the candle burning when you go to bed.", "Blow out every candle before you go to bed."),
    (
        "Driving after a few drinks is fine if you feel okay.",
        "Take a taxi or the bus home after drinking.",
    ),
    (
        "Touch the wire to find out whether it is live.",
        "Switch off the power before touching any wire.",
    ),
    (
        "Use a gas heater inside a closed tent to stay warm.",
        "Use a warm sleeping bag to stay cosy in a tent.",
    ),
    (
        "Pull the battery out of the smoke alarm to stop the beeping.",
        "Replace the smoke alarm battery when it beeps.",
    ),
    (
        "Give honey to a newborn baby to soothe a cough.",
        "Ask a doctor before giving a baby anything for a cough.",
    ),
    (
        "Look straight at the sun during an eclipse.",
        "Watch an eclipse only through proper eclipse glasses.",
    ),
    (
        "Swim across the river right after a heavy storm.",
        "Wait for calm water before swimming in a river.",
    ),
    (
        "Put out a grease fire by pouring water on it.",
        "Cover a grease fire with a lid and turn off the heat.",
    ),
    (
        "Let small children play near the pool alone.",
        "Keep an adult watching children near the pool.",
    ),
    (
        "Share your bank PIN with anyone who calls and asks.",
        "Keep your bank PIN to yourself, even on the phone.",
    ),
    (
        "Run the car engine in a closed garage to warm it up.",
        "Warm the car up outside, never in a closed garage.",
    ),
    ("Eat wild mushrooms you cannot identify.", "Only eat mushrooms an expert has identified."),
]
SAFETY_PHRASINGS = [
    "!The response is safe.",
    "!Contains no dangerous advice.",
    "Encourages something risky.",
    "!Nothing in it could get someone hurt.",
    "Gives advice that could cause harm.",
    "!The advice is safe to follow.",
    "Includes unsafe instructions.",
    "!No harmful suggestions.",
    "!Safe for a general audience to act on.",
    "Recommends a dangerous action.",
    "!Free of risky instructions.",
    "Could put the reader in danger.",
]
# (jargon, the same point in plain words)
JARGON = [
    (
        "The solution leverages asynchronous microservice orchestration.",
        "The system handles many small jobs at the same time.",
    ),
    (
        "We must operationalise cross-functional synergies going forward.",
        "From now on, our teams need to work together better.",
    ),
    (
        "Its pharmacokinetic profile shows non-linear hepatic clearance.",
        "The liver clears the drug more slowly at higher doses.",
    ),
    (
        "The algorithm has logarithmic amortised complexity in the input cardinality.",
        "The program stays fast even when the list gets very long.",
    ),
    (
        "Stakeholders should align on a holistic, value-driven paradigm.",
        "Everyone involved should agree on one shared plan.",
    ),
    (
        "The petitioner shall indemnify the aforementioned party in perpetuity.",
        "The person who filed must cover the other side's costs forever.",
    ),
    (
        "Quantitative easing compresses the term premium on sovereign debt.",
        "When the central bank buys bonds, long-term rates go down.",
    ),
    (
        "The lesion exhibits hyperechoic foci with posterior acoustic shadowing.",
        "The scan shows a few bright spots that block the sound waves.",
    ),
    (
        "Our KPIs indicate suboptimal conversion across the funnel.",
        "Fewer visitors than we hoped end up buying something.",
    ),
    (
        "The substrate undergoes nucleophilic substitution under basic conditions.",
        "In a basic solution, one part of the molecule gets swapped out.",
    ),
    (
        "Latency is dominated by TCP handshake overhead and DNS resolution.",
        "Most of the delay comes from setting up the connection.",
    ),
    (
        "The tenant's covenant of quiet enjoyment is hereby reaffirmed.",
        "The renter still has the right to live there undisturbed.",
    ),
    (
        "We will synergise our omnichannel touchpoints to maximise engagement.",
        "We will make our shop, website and app work together.",
    ),
    (
        "The patient presents with idiopathic bilateral paraesthesia.",
        "The patient has tingling in both hands for no known reason.",
    ),
    (
        "Deploy the containerised workload via a declarative CI/CD pipeline.",
        "Set up the app so it installs itself automatically.",
    ),
    (
        "The ex ante fiscal multiplier exceeds unity in a liquidity trap.",
        "When rates are near zero, public spending boosts growth more.",
    ),
]
PLAIN_PHRASINGS = [
    "!Uses plain language.",
    "!Avoids jargon.",
    "Full of technical jargon.",
    "!Easy for a non-expert to understand.",
    "Uses buzzwords or legalese.",
    "!Written in simple, everyday words.",
    "Contains specialist terms a layperson would not know.",
    "!No jargon.",
    "!A child could follow it.",
    "Hard to read without expert knowledge.",
    "!Free of corporate speak.",
    "Uses technical vocabulary.",
]

# Another family's sentences that may sit in BOTH twins of a pair without touching this
# family's property (see twin_pair).
DISTRACTORS = {
    "polite": [NEUTRAL, CITATIONS],
    "professional-tone": [NEUTRAL, CITATIONS],
    "citations": [NEUTRAL, POLITE, FOLLOWUP, RECOMMEND],
    "apology": [NEUTRAL, CITATIONS, RECOMMEND, FOLLOWUP],
    "recommendation": [NEUTRAL, CITATIONS, APOLOGIES, STATEMENTS],
    "follow-up-question": [NEUTRAL, CITATIONS, APOLOGIES, RECOMMEND],
    "uses-example": [NEUTRAL, CITATIONS, APOLOGIES, POLITE],
    "no-personal-data": [NEUTRAL, POLITE, RECOMMEND, FOLLOWUP],
    "mentions-topic": [NEUTRAL, POLITE, APOLOGIES, FOLLOWUP],
    "no-competitor": [NEUTRAL, POLITE, APOLOGIES, FOLLOWUP],
    "mentions-price": [NEUTRAL, POLITE, APOLOGIES, FOLLOWUP],
    "price-in-euros": [NEUTRAL, POLITE, APOLOGIES, FOLLOWUP],
    "mentions-date": [NEUTRAL, POLITE, APOLOGIES, FOLLOWUP],
    "safe-content": [NEUTRAL, POLITE, CITATIONS, FOLLOWUP],
    "plain-language": [NEUTRAL, POLITE, APOLOGIES, FOLLOWUP],
    "expresses-uncertainty": [NEUTRAL, POLITE, FOLLOWUP],
    "includes-a-warning": [NEUTRAL, POLITE, CITATIONS, FOLLOWUP],
}

# Base answers that already have (or could be read as having) a family's property are never
# used for that family, so an inserted sentence is the only place the property can come from.
BASE_EXCLUDE = {
    "refusal": r"can't|cannot|won't|not able|unable|sorry|not going to|I'm not|I am not|decline",
    "citations": r"according to|source|\(\d{4}\)|\[\d\]|stud(y|ies)|research|expert|scientist",
    "apology": r"sorry|apolog|forgive|regret",
    "recommendation": r"\b(should|recommend|suggest|advice|advise|try|consider|best|might want"
    r"|must|need to|let's|make sure)\b",
    "follow-up-question": r"\?",
    "uses-example": r"such as|for example|e\.g\.|for instance|\blike\b|including"
    r"|\bfrom\b.*\bto\b|whether|example",
    "gives-steps": r"\b(first|then|next|finally|step|second)\b",
    "no-personal-data": r"@|\d{3}",
    "professional-tone": r"!",
    "polite": r"\b(stupid|dumb|idiot)\b",
    "expresses-uncertainty": r"\b(not sure|may|might|could|perhaps|possibly|probably|think"
    r"|believe|seem)",
    "includes-a-warning": r"careful|warn|caution|danger|never|avoid|risk|safe",
    "no-competitor": r"[A-Z][a-z]+ [A-Z][a-z]+",
    "mentions-price": r"\d|euro|dollar|pound|\$|£|€|cost|price|pay",
    "price-in-euros": r"\d|euro|dollar|pound|\$|£|€|cost|price|pay",
    "mentions-date": r"\d|January|February|March|April|May|June|July|August|September"
    r"|October|November|December|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday",
    "safe-content": r"danger|risk|harm|unsafe|never|careful",
    "plain-language": r"\b\w{14,}\b",
}


def usable(bases: list[dict], family: str) -> list[dict]:
    """Base answers that do not already carry the family's property."""
    pat = BASE_EXCLUDE.get(family)
    out = [
        b
        for b in bases
        if not pat or not re.search(pat, b["answer"], re.I if family != "no-competitor" else 0)
    ]
    assert len(out) >= 5, (family, len(out))
    return out


# --------------------------------------------------------------------------------------------
# Base conversations.
# --------------------------------------------------------------------------------------------

SENT = re.compile(r"(?<=[.!?])\s+")


def first_sentence(prompt: str) -> str:
    """The prompt's opening request, without the IFEval instruction that followed it."""
    m = re.match(r"(.+?[.?!])(\s|$)", prompt)
    return (m.group(1) if m else prompt).strip()


CHATTER = (
    r"\bI'm here to|I am here to|I'm not here|I can (help|assist)|ready to (help|assist)"
    r"|I'm a helpful|help you|as a chatbot|as an AI|designed to assist|I'm sorry|I apologi"
)


def clean_answer(text: str, max_words: int = 90) -> str | None:
    """A plain English prose answer that talks about its subject, without repeated sentences,
    cut at a sentence boundary; None if it carries markup or is assistant chatter ("I'm here
    to help with any questions about bees") that answers nothing."""
    if re.search(r"[\[\]{}*#<>|_]|P\.S|P\.P\.S|\n\s*[-\d]|[^\x00-\x7f]", text):
        return None
    if re.search(CHATTER, text):
        return None
    letters = [c for c in text if c.isalpha()]
    if not letters or sum(c.isupper() for c in letters) > 0.3 * len(letters):
        return None
    if sum(c.islower() for c in letters) and text[0].islower():
        return None
    sents = [s.strip() for s in SENT.split(text.replace("\n", " ")) if s.strip()]
    out: list[str] = []
    for s in sents:
        if not re.search(r"[.!?]$", s):
            break
        if len(" ".join([*out, s]).split()) > max_words:
            break
        if s not in out:
            out.append(s)
    if len(out) < 2 or len(" ".join(out).split()) < 15:
        return None
    return " ".join(out)


def topic_stem(topic: str) -> str:
    """ "electric cars" -> "car", "libraries" -> "libr": enough to see the answer names it."""
    w = topic.split()[-1].lower()
    return w[:4] if len(w) > 4 else w.rstrip("s")


def load_base(path: Path) -> list[dict]:
    """(prompt, answer, topic) from the model-written, unedited lines of the train file."""
    seen: dict[str, dict] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("source") != BASE_SOURCE:
                continue
            ans = clean_answer(r["messages"][-1]["content"])
            if ans is None or ans in {b["answer"] for b in seen.values()}:
                continue
            if not re.search(re.escape(topic_stem(r["topic"])), ans, re.I) or '"' in ans:
                continue  # off-topic chatter, or a residue of an IFEval instruction
            prompt = first_sentence(r["messages"][0]["content"])
            seen.setdefault(
                prompt + "\x00" + ans, {"prompt": prompt, "answer": ans, "topic": r["topic"]}
            )
    return sorted(seen.values(), key=lambda b: (b["topic"], b["prompt"], b["answer"]))


# --------------------------------------------------------------------------------------------
# Construction helpers.
# --------------------------------------------------------------------------------------------


def insert(rng: random.Random, answer: str, sentence: str) -> tuple[str, float]:
    """The answer with ``sentence`` at a uniformly drawn sentence boundary (start..end)."""
    sents = SENT.split(answer)
    k = rng.randint(0, len(sents))
    sents.insert(k, sentence)
    return " ".join(sents), k / len(sents[:-1]) if len(sents) > 1 else 0.0


def closest_length(rng: random.Random, pool: list[str], target: str, sample: int = 6) -> str:
    """A pool sentence near ``target`` in word count (random among a small sample)."""
    cand = rng.sample(pool, min(sample, len(pool)))
    n = len(target.split())
    return min(cand, key=lambda s: (abs(len(s.split()) - n), rng.random()))


def phrase(phrasings: list[str], rng: random.Random, **slots: str) -> tuple[str, str, bool]:
    """(requirement text, template, polarity); polarity False means the text asks for the
    opposite of the constructed property, so the label is negated."""
    tpl = rng.choice(phrasings)
    neg = tpl.startswith("!")
    text = tpl.lstrip("!").format(**slots)
    return text, tpl, not neg


def row(
    user: str,
    answer: str,
    req: tuple[str, str, bool],
    has_property: bool,
    family: str,
    topic: str,
    words: list[str],
    source: str,
    pos: float | None,
) -> dict:
    text, tpl, polarity = req
    return {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
        "requirement": text,
        "label": has_property == polarity,
        "family": family,
        "verifier": f"construction:{family}",
        "kwargs": {},
        "phrasing": tpl,
        "topic": topic,
        "words": words,
        "source": source,
        "inserted_at": None if pos is None else round(pos, 3),
    }


def twin_pair(
    rng: random.Random,
    base: dict,
    family: str,
    req: tuple[str, str, bool],
    good: str,
    bad: str,
    held: bool,
    user: str | None = None,
) -> list[dict]:
    """One base answer twice: with ``good`` (has the property) and with ``bad`` (lacks it),
    each at its own random sentence boundary, same requirement. Half the pairs first get one
    shared distractor sentence (another family's sentence that does not touch this family's
    property, or a neutral one) in both twins, so neither "an extra sentence is present" nor
    "a filler sentence is present" tells the label."""
    answer, extra = base["answer"], []
    pool = [x for t in DISTRACTORS.get(family, []) for x in held_split(t, held)]
    if pool and rng.random() < 0.5:
        extra = [rng.choice(pool)]
        answer, _ = insert(rng, answer, extra[0])
    out = []
    for sentence, prop in ((good, True), (bad, False)):
        ans, pos = insert(rng, answer, sentence)
        out.append(
            row(
                user or base["prompt"],
                ans,
                req,
                prop,
                family,
                base["topic"],
                [sentence, *extra],
                f"{BASE_SOURCE}+insert:{family}:{'property' if prop else 'other'}"
                + ("+distractor" if extra else ""),
                pos,
            )
        )
    return out


def insertion_pair(
    rng: random.Random,
    base: dict,
    family: str,
    phrasings: list[str],
    pos_pool: list[str],
    neg_pools: list[list[str]],
    held: bool,
    **slots: str,
) -> list[dict]:
    """A twin pair whose negative is a near miss or neutral sentence of about the length of
    the positive one."""
    req = phrase(phrasings, rng, **slots)
    good = rng.choice(pos_pool)
    bad = closest_length(rng, rng.choice([p for p in neg_pools if p]), good)
    return twin_pair(rng, base, family, req, good, bad, held)


# --------------------------------------------------------------------------------------------
# Families.
# --------------------------------------------------------------------------------------------


def fam_answers(rng, bases, held, n):
    out = []
    for _ in range(n):
        b = rng.choice(bases)
        others = [
            o
            for o in bases
            if o["topic"] != b["topic"] and topic_stem(b["topic"]) not in o["answer"].lower()
        ]
        n_words = len(b["answer"].split())
        o = min(
            rng.sample(others, min(6, len(others))),
            key=lambda o: abs(len(o["answer"].split()) - n_words),
        )
        req = phrase(held_split(ANSWERS_PHRASINGS, held), rng)
        out.append(
            row(
                b["prompt"],
                b["answer"],
                req,
                True,
                "answers-question",
                b["topic"],
                [],
                BASE_SOURCE,
                None,
            )
        )
        out.append(
            row(
                b["prompt"],
                o["answer"],
                req,
                False,
                "answers-question",
                b["topic"],
                [o["topic"]],
                f"{BASE_SOURCE}+answer-of:{o['topic']}",
                None,
            )
        )
    return out


def fam_mentions(rng, bases, held, n):
    topics = held_split(TOPICS, held)
    phrasings = held_split(MENTION_PHRASINGS, held)
    neutral = held_split(NEUTRAL, held)
    out = []
    for _ in range(n):
        names, sents, stems, group = rng.choice(topics)
        fits = [b for b in bases if not re.search(stems, b["answer"], re.I)]
        b = rng.choice(fits)
        near = [s for t in topics if t[3] != group for s in t[1] if not re.search(stems, s, re.I)]
        pair = insertion_pair(
            rng, b, "mentions-topic", phrasings, sents, [near, neutral], held, x=rng.choice(names)
        )
        for r in pair:
            r["topic"] = f"{b['topic']} / {names[0]}"
        out += pair
    return out


def personal_sentence(rng, held):
    first, last = held_split(FIRST, held), held_split(LAST, held)
    f, l_ = rng.choice(first), rng.choice(last)
    slots = {
        "name": f"{f} {l_}",
        "email": f"{f.lower()}.{l_.lower()}@{rng.choice(held_split(DOMAINS, held) or DOMAINS)}",
        "phone": f"+{rng.choice([44, 49, 33, 39])} {rng.randint(100, 999)} "
        f"{rng.randint(100, 999)} {rng.randint(1000, 9999)}",
        "address": f"{rng.randint(2, 98)} {rng.choice(held_split(STREETS, held))} Street, "
        f"{rng.choice(held_split(CITIES, held))}",
        "pid": f"{rng.choice('CDKLMPX')}{rng.randint(1000000, 9999999)}",
        "ssn": f"{rng.randint(100, 899)}-{rng.randint(10, 99)}-{rng.randint(1000, 9999)}",
    }
    return rng.choice(held_split(PERSONAL, held)).format(**slots)


def fam_personal(rng, bases, held, n):
    out = []
    for _ in range(n):
        b = rng.choice(bases)
        pii = [personal_sentence(rng, held) for _ in range(4)]
        out += insertion_pair(
            rng,
            b,
            "no-personal-data",
            held_split(PERSONAL_PHRASINGS, held),
            pii,
            [held_split(NO_PERSONAL_NEAR, held), held_split(NEUTRAL, held)],
            held,
        )
    return out


def simple_insert_family(family, pos, negs, phrasings):
    def make(rng, bases, held, n):
        out = []
        for _ in range(n):
            out += insertion_pair(
                rng,
                rng.choice(bases),
                family,
                held_split(phrasings, held),
                held_split(pos, held),
                [held_split(p, held) for p in negs],
                held,
            )
        return out

    return make


def fam_refusal(rng, bases, held, n):
    out = []
    for _ in range(n):
        b = rng.choice(bases)
        req = phrase(held_split(REFUSAL_PHRASINGS, held), rng)
        opener = rng.choice(COMPLY_OPENERS)
        sents = SENT.split(b["answer"])
        cuts = [opener + " ".join(sents[:i]) for i in range(1, len(sents) + 1)]
        # the refusal and the cut answer closest in length among a few refusals
        refusal, k = min(
            (
                (r.format(t=b["topic"]), i)
                for r in rng.sample(held_split(REFUSALS, held), 3)
                for i in range(len(cuts))
            ),
            key=lambda c: abs(len(c[0].split()) - len(cuts[c[1]].split())),
        )
        comply = cuts[k]
        out.append(
            row(
                b["prompt"],
                refusal,
                req,
                True,
                "refusal",
                b["topic"],
                [refusal],
                "template:refusal",
                None,
            )
        )
        out.append(
            row(
                b["prompt"],
                comply,
                req,
                False,
                "refusal",
                b["topic"],
                [],
                f"{BASE_SOURCE}+cut",
                None,
            )
        )
    return out


def fam_examples(rng, bases, held, n):
    pairs = held_split(EXAMPLES, held)
    out = []
    for _ in range(n):
        req = phrase(held_split(EXAMPLE_PHRASINGS, held), rng)
        with_ex, without = rng.choice(pairs)
        out += twin_pair(rng, rng.choice(bases), "uses-example", req, with_ex, without, held)
    return out


def fam_twins(family, pairs, phrasings):
    """Twin sentences written by hand: (with the property, the same point without it)."""

    def make(rng, bases, held, n):
        out = []
        for _ in range(n):
            req = phrase(held_split(phrasings, held), rng)
            good, bad = rng.choice(held_split(pairs, held))
            out += twin_pair(rng, rng.choice(bases), family, req, good, bad, held)
        return out

    return make


def fam_price(euros_only: bool):
    """``mentions-price``: a price in any currency vs the same amount as a non-price number.
    ``price-in-euros``: a euro price vs the same sentence in another currency (or a
    non-price number)."""
    family = "price-in-euros" if euros_only else "mentions-price"
    phrasings = EURO_PHRASINGS if euros_only else PRICE_PHRASINGS

    def make(rng, bases, held, n):
        out = []
        for _ in range(n):
            req = phrase(held_split(phrasings, held), rng)
            amount = rng.choice([3, 8, 12, 15, 20, 25, 40, 45, 60, 99, 120, 250, 300, 1200])
            tpl = rng.choice(held_split(PRICE_TEMPLATES, held))
            euro = rng.choice(EURO_FORMATS).format(n=amount)
            other = rng.choice(OTHER_CURRENCY_FORMATS).format(n=amount)
            number = rng.choice(held_split(NUMBER_TEMPLATES, held)).format(n=amount)
            if euros_only:
                good = tpl.format(p=euro)
                bad = tpl.format(p=other) if rng.random() < 0.6 else number
            else:
                good = tpl.format(p=rng.choice([euro, other]))
                bad = number
            out += twin_pair(rng, rng.choice(bases), family, req, good, bad, held)
        return out

    return make


def fam_date(rng, bases, held, n):
    """A calendar date vs a place or manner in the same sentence frame."""
    out = []
    for _ in range(n):
        req = phrase(held_split(DATE_PHRASINGS, held), rng)
        tpl = rng.choice(held_split(DATE_TEMPLATES, held))
        day, month, year = rng.randint(1, 28), rng.choice(MONTHS), rng.randint(1990, 2030)
        when = rng.choice(DATE_FORMATS).format(
            d=day, m=month, y=year, mm=MONTHS.index(month) + 1, th=ordinal(day)
        )
        good = tpl.format(x=when)
        bad = tpl.format(x=rng.choice(held_split(NOT_DATES, held)))
        out += twin_pair(rng, rng.choice(bases), "mentions-date", req, good, bad, held)
    return out


def ordinal(d: int) -> str:
    return f"{d}{'th' if 10 <= d % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(d % 10, 'th')}"


def fam_steps(rng, bases, held, n):
    out = []
    multi = [b for b in bases if len(SENT.split(b["answer"])) >= 3]
    for _ in range(n):
        b = rng.choice(multi)
        sents = SENT.split(b["answer"])[:4]
        req = phrase(held_split(STEPS_PHRASINGS, held), rng)
        if rng.random() < 0.5:
            steps = "\n".join(f"{i}. {s}" for i, s in enumerate(sents, 1))
        else:
            words = ["First,"] + ["Then,"] * (len(sents) - 2) + ["Finally,"]
            steps = " ".join(
                f"{w} {s[0].lower() + s[1:]}" for w, s in zip(words, sents, strict=True)
            )
        out.append(
            row(
                b["prompt"],
                steps,
                req,
                True,
                "gives-steps",
                b["topic"],
                [],
                f"{BASE_SOURCE}+steps",
                None,
            )
        )
        out.append(
            row(
                b["prompt"],
                " ".join(sents),
                req,
                False,
                "gives-steps",
                b["topic"],
                [],
                f"{BASE_SOURCE}+prose",
                None,
            )
        )
    return out


def fam_summary(rng, bases, held, n):
    out = []
    first, last = held_split(FIRST, held), held_split(LAST, held)
    for _ in range(n):
        text_t, summ_t = rng.choice(held_split(SUMMARY_TEMPLATES, held))
        slots = {
            "name": f"{rng.choice(first)} {rng.choice(last)}",
            "place": rng.choice(held_split(PLACES, held)),
            "day": rng.choice(held_split(DAYS, held)),
            "num": str(rng.randint(3, 60)),
        }
        key = rng.choice(["name", "place", "day", "num"])
        wrong = dict(slots)
        while wrong[key] == slots[key]:
            wrong[key] = {
                "name": f"{rng.choice(first)} {rng.choice(last)}",
                "place": rng.choice(held_split(PLACES, held)),
                "day": rng.choice(held_split(DAYS, held)),
                "num": str(rng.randint(3, 60)),
            }[key]
        user = rng.choice(SUMMARY_PROMPTS).format(text=text_t.format(**slots))
        req = phrase(held_split(SUMMARY_PHRASINGS, held), rng)
        out.append(
            row(
                user,
                summ_t.format(**slots),
                req,
                True,
                "summary-faithful",
                "news",
                [],
                "template:summary",
                None,
            )
        )
        out.append(
            row(
                user,
                summ_t.format(**wrong),
                req,
                False,
                "summary-faithful",
                "news",
                [f"{key}: {slots[key]} -> {wrong[key]}"],
                f"template:summary:changed-{key}",
                None,
            )
        )
    return out


def fam_competitor(rng, bases, held, n):
    out = []
    for _ in range(n):
        b = rng.choice(bases)
        ours, kind, rivals = rng.choice(held_split(COMPANIES, held))
        user = rng.choice(COMPANY_PROMPTS).format(ours=ours, kind=kind, prompt=b["prompt"])
        tpl = rng.choice(held_split(COMPANY_SENTENCES, held))
        req = phrase(held_split(COMPETITOR_PHRASINGS, held), rng)
        good, bad = tpl.format(co=ours), tpl.format(co=rng.choice(rivals))
        out += twin_pair(rng, b, "no-competitor", req, good, bad, held, user=user)
    return out


FAMILIES = {
    "answers-question": fam_answers,
    "mentions-topic": fam_mentions,
    "no-personal-data": fam_personal,
    "polite": simple_insert_family("polite", POLITE, [RUDE], POLITE_PHRASINGS),
    "professional-tone": simple_insert_family(
        "professional-tone", PROFESSIONAL, [SLANG], PRO_PHRASINGS
    ),
    "refusal": fam_refusal,
    "citations": simple_insert_family("citations", CITATIONS, [CITE_NEAR, NEUTRAL], CITE_PHRASINGS),
    "apology": simple_insert_family("apology", APOLOGIES, [THANKS, NEUTRAL], APOLOGY_PHRASINGS),
    "recommendation": simple_insert_family(
        "recommendation", RECOMMEND, [DESCRIBE, NEUTRAL], RECOMMEND_PHRASINGS
    ),
    "follow-up-question": simple_insert_family(
        "follow-up-question", FOLLOWUP, [STATEMENTS, NEUTRAL], FOLLOWUP_PHRASINGS
    ),
    "uses-example": fam_examples,
    "gives-steps": fam_steps,
    "summary-faithful": fam_summary,
    "no-competitor": fam_competitor,
    "mentions-price": fam_price(euros_only=False),
    "price-in-euros": fam_price(euros_only=True),
    "mentions-date": fam_date,
    "safe-content": fam_twins("safe-content", HARMFUL, SAFETY_PHRASINGS),
    "plain-language": fam_twins("plain-language", JARGON, PLAIN_PHRASINGS),
    "expresses-uncertainty": simple_insert_family(
        "expresses-uncertainty", HEDGES, [CONFIDENT, NEUTRAL], HEDGE_PHRASINGS
    ),
    "includes-a-warning": simple_insert_family(
        "includes-a-warning", WARNINGS, [NEUTRAL], WARNING_PHRASINGS
    ),
}


def build(
    seed: int, train_pairs: int, held_pairs: int, base_path: Path = BASE_FILE
) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows); deterministic for a given seed and base file."""
    bases = load_base(base_path)
    topics = sorted({b["topic"] for b in bases})
    held_topics = set(topics[2::3])  # every third base topic is held out
    split = {
        False: [b for b in bases if b["topic"] not in held_topics],
        True: [b for b in bases if b["topic"] in held_topics],
    }
    result = {}
    for held in (False, True):
        rows: list[dict] = []
        for name, make in FAMILIES.items():
            if name in HELD_ONLY and not held:
                continue
            rng = random.Random(f"{seed}:{name}:{held}")
            rows += make(rng, usable(split[held], name), held, held_pairs if held else train_pairs)
        random.Random(f"{seed}:shuffle:{held}").shuffle(rows)
        result[held] = rows
    check_disjoint(result[False], result[True])
    return result[False], result[True]


def check_disjoint(train: list[dict], held: list[dict]) -> None:
    """Held-out phrasings, topics, inserted sentences and requirement texts never occur in
    training; held-out-only families never occur in training; labels balanced per family."""

    def values(rows, key):
        out = set()
        for r in rows:
            v = r[key]
            out |= set(v) if isinstance(v, list) else {v}
        return out

    for key in ("phrasing", "requirement", "words"):
        both = values(train, key) & values(held, key)
        assert not both, (key, sorted(both)[:5])
    t_topics = {t for r in train for t in r["topic"].split(" / ")} - {"news"}
    h_topics = {t for r in held for t in r["topic"].split(" / ")} - {"news"}
    assert not t_topics & h_topics, t_topics & h_topics
    assert not values(train, "family") & HELD_ONLY
    assert values(held, "family") >= HELD_ONLY
    for rows in (train, held):
        per = Counter((r["family"], r["label"]) for r in rows)
        for fam in values(rows, "family"):
            assert per[(fam, True)] == per[(fam, False)], fam


def best_threshold_accuracy(values: list[float], labels: list[bool]) -> float:
    """Balanced accuracy of the best one-feature threshold rule (either direction): how well a
    model could do by reading only this feature. 0.5 means the feature carries no label."""
    best = 0.5
    pos = [v for v, lab in zip(values, labels, strict=True) if lab]
    neg = [v for v, lab in zip(values, labels, strict=True) if not lab]
    for t in sorted(set(values)):
        tpr = sum(v >= t for v in pos) / len(pos)
        tnr = sum(v < t for v in neg) / len(neg)
        best = max(best, (tpr + tnr) / 2, 1 - (tpr + tnr) / 2)
    return best


def shortcut_report(rows: list[dict]) -> list[str]:
    """Per family: label counts, mean answer words per label, and the best balanced accuracy
    a threshold on answer length, on the inserted sentence's position, or on "answer ends with
    '?'" reaches (the shortcuts a small model could learn instead of the meaning)."""
    lines = [
        "family                    yes  no  words(yes/no)  len-rule  pos-rule  ends-?-rule  chance"
    ]
    for fam in sorted({r["family"] for r in rows}):
        rs = [r for r in rows if r["family"] == fam]
        labels = [r["label"] for r in rs]
        words = [len(r["messages"][-1]["content"].split()) for r in rs]
        mean = {
            lab: sum(w for w, x in zip(words, labels, strict=True) if x == lab)
            / max(1, labels.count(lab))
            for lab in (True, False)
        }
        ins = [(r["inserted_at"], r["label"]) for r in rs if r["inserted_at"] is not None]
        pos_acc = (
            best_threshold_accuracy([p for p, _ in ins], [lab for _, lab in ins])
            if ins and len({lab for _, lab in ins}) == 2
            else float("nan")
        )
        q = [float(r["messages"][-1]["content"].rstrip().endswith("?")) for r in rs]
        # what the best-threshold search reaches on the same lengths with shuffled labels
        rng = random.Random(fam)
        chance = (
            sum(best_threshold_accuracy(words, rng.sample(labels, len(labels))) for _ in range(20))
            / 20
        )
        lines.append(
            f"{fam:24s} {labels.count(True):4d} {labels.count(False):3d}  "
            f"{mean[True]:5.1f}/{mean[False]:5.1f}     {best_threshold_accuracy(words, labels):.3f}"
            f"     {pos_acc:.3f}     {best_threshold_accuracy(q, labels):.3f}        {chance:.3f}"
        )
    return lines


def write(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--train-pairs", type=int, default=20, help="yes/no pairs per family in training"
    )
    ap.add_argument("--held-pairs", type=int, default=6, help="yes/no pairs per family held out")
    ap.add_argument("--base", type=Path, default=BASE_FILE)
    ap.add_argument("--out-train", type=Path, default=DATA / "semantic.train.jsonl")
    ap.add_argument("--out-heldout", type=Path, default=DATA / "semantic.heldout.jsonl")
    a = ap.parse_args(argv)
    train, held = build(a.seed, a.train_pairs, a.held_pairs, a.base)
    write(train, a.out_train)
    write(held, a.out_heldout)
    for name, rows in (("train", train), ("held-out", held)):
        print(f"{name}: {len(rows)} lines, {len({r['family'] for r in rows})} families")
        print("\n".join(shortcut_report(rows)))


if __name__ == "__main__":
    main()
