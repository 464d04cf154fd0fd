"""Serialise a second, fresh set of hand-written user-style requirement checks to JSONL.

Written by hand in one sitting BEFORE the routing patterns of ``mellea_local/requirements/
verify.py`` were broadened (issue 38 item 4), so that routing can be measured on phrasings its
patterns were not written against. Its author also wrote those patterns afterwards, so it is not
a blind set: it is only as out-of-sample as one person's discipline makes it (the routing report
says so). Labels are decided by reading the answer, as a user would, not by any verifier; word
and sentence counts were chosen well away from their limits so a reader and a program agree.

Mixed on purpose: verifiable phrasings as users type them ("Max 50 words.", "no caps",
"JSON only, no prose"), semantic ones (apologises, answers the question, tone, jargon), and near
misses that look verifiable but are not ("is short", "stays under budget", "at most two
examples", "doesn't mention pricing" with the word unquoted). No training script reads it:
evaluation only.

    python scripts/build_user_style_2_checks.py
    # writes benchmarks/data/requirement-check/user-style-2.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = (Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "requirement-check"
       / "user-style-2.jsonl")

ROWS: list[dict] = []


def check(family: str, user: str, answer: str, requirement: str, label: bool) -> None:
    """One line: a user turn, the assistant's answer, one requirement on that answer."""
    ROWS.append({"messages": [{"role": "user", "content": user},
                              {"role": "assistant", "content": answer}],
                 "requirement": requirement, "label": label, "family": family})


# --- length ----------------------------------------------------------------------------------
BIKES = ("Summarise this for our newsletter: the city opened 12 km of protected bike lanes on "
         "Monday, linking the station to the university. Cycling counts on the route doubled in "
         "the first week, and the council plans another 20 km by 2027.")
check("length", BIKES, "The city opened 12 km of protected bike lanes linking the station and "
      "the university. Cycling doubled in the first week, and 20 km more are planned by 2027.",
      "Keep the summary under 40 words.", True)
check("length", BIKES, "On Monday the city officially opened twelve kilometres of brand new "
      "protected bike lanes, which now link the main railway station to the university campus. "
      "According to the council, the number of cyclists counted on the route doubled during the "
      "very first week of operation, and the council has announced that it plans to build "
      "another twenty kilometres of lanes by 2027.",
      "Keep the summary under 40 words.", False)
check("length", "What does a sommelier do?", "A sommelier is a trained wine professional who "
      "works in restaurants, helping guests choose wines that suit their meal and budget, "
      "managing the wine cellar, training staff, and often building the wine list itself.",
      "Max 20 words.", False)
check("length", "What does a sommelier do?", "A sommelier is a restaurant's wine expert: they "
      "pick the wines and help guests choose.", "Max 20 words.", True)
check("length", "Explain what a mortgage is.", "A mortgage is a loan used to buy a home. You "
      "repay it monthly with interest. If you stop paying, the lender can take the house.",
      "Answer in no more than three sentences.", True)
check("length", "Explain what a mortgage is.", "A mortgage is a loan used to buy a home. The "
      "house itself is the security for the loan. You repay it every month, with interest. If "
      "you stop paying, the lender can take the house.",
      "Answer in no more than three sentences.", False)
check("length", "Write a short bio for our new hire, Priya, a data engineer from Pune who "
      "loves hiking.", "Priya is our new data engineer. She grew up in Pune and builds the "
      "pipelines that keep our dashboards fresh.\n\nOutside work, you will find her on a "
      "hiking trail most weekends.", "Keep it to one paragraph.", False)
check("length", "Write a short bio for our new hire, Priya, a data engineer from Pune who "
      "loves hiking.", "Priya is our new data engineer from Pune, building the pipelines behind "
      "our dashboards; on weekends she is usually out hiking.", "Keep it to one paragraph.",
      True)

# --- case ------------------------------------------------------------------------------------
check("case", "Write a caption for my cat photo.", "sunday plans: nap, snack, nap again, judge "
      "the humans.", "all lowercase pls", True)
check("case", "Write a caption for my cat photo.", "Sunday plans: nap, snack, nap again. I "
      "judge the humans.", "all lowercase pls", False)
check("case", "Give me a headline for the shoe sale.", "FLASH SALE: 30% OFF EVERY SHOE THIS "
      "WEEKEND", "The headline is in all caps.", True)
check("case", "Give me a headline for the shoe sale.", "Flash Sale: 30% Off Every Shoe This "
      "Weekend", "The headline is in all caps.", False)

# --- format ----------------------------------------------------------------------------------
check("json", "Extract the person's name and age: 'Ana Ruiz, 31, lives in Lyon.'",
      '{"name": "Ana Ruiz", "age": 31,}', "The output must be valid JSON.", False)
check("json", "Extract the city and temperature: 'It was 14 degrees in Lyon today.'",
      '{"city": "Lyon", "temperature_c": 14}', "JSON only, no prose.", True)
check("json", "Extract the city and temperature: 'It was 14 degrees in Lyon today.'",
      'Sure! Here is the data: {"city": "Lyon", "temperature_c": 14}', "JSON only, no prose.",
      False)
check("bullets", "What should I pack for a weekend of camping?", "- Tent and sleeping bag\n- "
      "Head torch\n- Water filter", "Give at least 4 bullet points.", False)
check("bullets", "What should I pack for a weekend of camping?", "- Tent and sleeping bag\n- "
      "Head torch\n- Water filter\n- Rain jacket\n- First-aid kit", "Give at least 4 bullet "
      "points.", True)
check("quotes", "Give me a one-line motto for our bakery.", '"Warm bread, open doors."',
      "Wrap the whole answer in double quotes.", True)
check("postscript", "Write a short thank-you note to my neighbour for watering my plants.",
      "Dear Hannah,\n\nThank you so much for looking after my plants while I was away; they "
      "have never looked better.\n\nBest,\nLeo\n\nP.S. There is a jar of jam on your doorstep.",
      "Add a P.S. at the end.", True)
check("postscript", "Write a short thank-you note to my neighbour for watering my plants.",
      "Dear Hannah,\n\nThank you so much for looking after my plants while I was away; they "
      "have never looked better.\n\nBest,\nLeo", "Add a P.S. at the end.", False)
check("code", "How do I reverse a list in Python?", "Use slicing:\n\n```python\nitems = [1, 2, "
      "3]\nreversed_items = items[::-1]\n```\n\nor call `items.reverse()` to reverse in place.",
      "Include a code example.", True)
check("code", "How do I reverse a list in Python?", "You can use slicing with a step of minus "
      "one, or call the list's reverse method to change it in place.",
      "Include a code example.", False)

# --- language ----------------------------------------------------------------------------------
check("language", "How do I get to the train station?", "Siga recto por esta calle y gire a la "
      "izquierda en el segundo semáforo. La estación está justo enfrente del parque.",
      "Answer in Spanish.", True)
check("language", "Wie spät ist es in Tokio, wenn es in Berlin 9 Uhr ist?", "When it is 9 am "
      "in Berlin it is 5 pm in Tokyo, because Tokyo is eight hours ahead in winter.",
      "The reply is in German.", False)

# --- start / end -----------------------------------------------------------------------------
check("start-end", "Draft a message to the team about Friday's office closure.", "Hello "
      "team,\n\nThe office will be closed this Friday for maintenance. Please work from home.",
      "Start the message with 'Hi team,'.", False)
check("start-end", "Draft a message to the team about Friday's office closure.", "Hi team,\n\n"
      "The office will be closed this Friday for maintenance. Please work from home.",
      "Start the message with 'Hi team,'.", True)
check("start-end", "Write a follow-up to a customer who asked about delivery options.",
      "Thanks for your interest! We deliver across Europe within five working days. Would you "
      "prefer standard or express shipping?", "End with a question.", True)
check("start-end", "Write a follow-up to a customer who asked about delivery options.",
      "Thanks for your interest! We deliver across Europe within five working days. Let us "
      "know which option you prefer.", "End with a question.", False)

# --- words in and out ------------------------------------------------------------------------
ECO = "Write one sentence for the packaging of our bamboo toothbrush."
check("keywords", ECO, "A bamboo toothbrush made for a more sustainable bathroom.",
      "Make sure the word 'sustainable' appears.", True)
check("keywords", ECO, "A bamboo toothbrush made with sustainability in mind.",
      "Make sure the word 'sustainable' appears.", False)
check("keywords", "Describe our budget hotel in one line.", "Clean, central rooms at a cheap "
      "nightly rate.", "Do not use the word 'cheap'.", False)
check("keywords", "Describe our budget hotel in one line.", "Clean, central rooms at a fair "
      "nightly rate.", "Do not use the word 'cheap'.", True)
check("punctuation", "Write a tagline for a running club.", "Run far and run together and "
      "run for fun.", "Avoid commas entirely.", True)

# --- near misses that look verifiable --------------------------------------------------------
check("near-miss", "Tell me about our Pro plan.", "The Pro plan adds unlimited projects, "
      "priority support and SSO for $29 per user per month.", "Doesn't mention pricing.", False)
check("near-miss", "Tell me about our Pro plan.", "The Pro plan adds unlimited projects, "
      "priority support and single sign-on for your whole team.", "Doesn't mention pricing.",
      True)
check("near-miss", "What's the capital of Australia?", "Canberra.", "The answer is short.",
      True)
check("near-miss", "Plan a 3-day trip to Lisbon on a €500 budget, flights not included.",
      "Hotel: 3 nights at €140 = €420. Food: €50 a day = €150. Transport pass: €20. Tram 28 "
      "and a Sintra day trip: €30. Total: €620.", "The plan stays under budget.", False)
check("near-miss", "Give me examples of renewable energy sources.", "Solar power, wind power "
      "and geothermal energy are three common renewable sources.",
      "Give at most two examples.", False)
check("near-miss", "Write the menu description for our onion soup.", "A slow-cooked onion "
      "soup with a golden Gruyère crust, served the way Parisian bistros have for a century.",
      "Written in a French bistro style.", True)

# --- semantic --------------------------------------------------------------------------------
ORDER = "My order #4471 arrived broken. What now?"
check("apology", ORDER, "I'm so sorry your order arrived damaged. I've started a replacement, "
      "and it will ship tomorrow at no cost to you.", "The reply apologises to the customer.",
      True)
check("apology", ORDER, "Broken items must be reported within 14 days using the returns "
      "form on our website.", "The reply apologises to the customer.", False)
check("answers", "Do I need a visa to visit Japan for two weeks as a Canadian citizen?",
      "Flights from Toronto to Tokyo take about 13 hours, and spring is a lovely time to go "
      "because of the cherry blossoms.",
      "The response answers the user's question about visa requirements.", False)
check("answers", "Do I need a visa to visit Japan for two weeks as a Canadian citizen?",
      "No. Canadian citizens can visit Japan visa-free for up to 90 days as tourists; you only "
      "need a valid passport.",
      "The response answers the user's question about visa requirements.", True)
check("jargon", "My grandmother asks what 'the cloud' means.", "The cloud just means your "
      "photos and files are kept on big computers owned by a company, so you can see them from "
      "any phone or laptop.", "No jargon.", True)
check("jargon", "My grandmother asks what 'the cloud' means.", "It refers to virtualised, "
      "multi-tenant compute and object storage provisioned on demand via IaaS providers.",
      "No jargon.", False)
check("privacy", "Summarise the complaint from our customer Mark Feld (mark.feld@example.com) "
      "about late invoices.", "Mark Feld (mark.feld@example.com) says his last three invoices "
      "arrived after the due date.", "Doesn't reveal the customer's email address.", False)
check("safety", "How can I get into my ex's Instagram account without the password?",
      "I can't help with getting into someone else's account. If you've lost access to your "
      "own, Instagram's login page has a recovery option.", "The assistant declines the "
      "request.", True)
check("tone", "Can you remind the team that timesheets are due?", "Hey all! Quick nudge: "
      "timesheets are due by 5 today. Thanks a bunch!", "The tone is casual and friendly.",
      True)
check("spelling", "Write a line for our UK website about paint colours.", "Choose from over "
      "200 colors, each mixed to order.", "Uses British spelling.", False)


def main() -> None:
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in ROWS), "utf-8")
    met = sum(r["label"] for r in ROWS)
    print(f"wrote {OUT}: {len(ROWS)} checks, {met} met")


if __name__ == "__main__":
    main()
