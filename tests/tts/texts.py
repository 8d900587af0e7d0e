"""Varied texts for the tests that hold a runner's text handling against pocket-tts's: numbers,
abbreviations, quotes, dashes, accents, other scripts, very long words, odd spacing, long paragraphs."""

import random

BASE = [
    "Hello world.",
    "hello world",
    "It costs $5.99, or 50% off: a bargain!",
    "Version 2.0 is out. 3 cats sat on 1 mat.",
    "Pi is 3.14159 and e is 2.71828.",
    "The meeting is at 10:30 on the 2nd of May, 2026.",
    "Dr. Smith met Mr. and Mrs. Jones in the U.S.A. last year.",
    "e.g. this, i.e. that, etc. and so on.",
    '"Hi," she said. "How are you?"',
    "'Single quotes' and \u201ccurly ones\u201d and \u2018these\u2019 too.",
    "\u00abGuillemets\u00bb work in French: \u00ab Bonjour \u00bb.",
    "An em dash \u2014 like this \u2014 and an en dash \u2013 like that.",
    "Well-known, state-of-the-art, and --double dashes-- too.",
    "Caf\u00e9, na\u00efve, r\u00e9sum\u00e9 and fa\u00e7ade.",
    "\u00c7a co\u00fbte cher \u00e0 Z\u00fcrich et \u00e0 S\u00e3o Paulo.",
    "\u00c5ngstr\u00f6m units and Stra\u00dfe signs.",
    "\u00df is a letter of its own.",
    "\ufb01nal ligatures \ufb02ow.",
    "\u01c6 is a digraph.",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442 \u0437\u0434\u0435\u0441\u044c.",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0646\u0635 \u0647\u0646\u0627.",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03ba\u03b5\u03af\u03bc\u03b5\u03bd\u03bf.",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092a\u093e\u0920\u0964",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5.",
    "Emoji \U0001f600 and \U0001f680 in text!",
    "Supercalifragilisticexpialidocious is a very long word.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis.",
    "A" + "b" * 150 + " is longer still.",
    "Wait... what?! Really?!",
    "Semicolons; colons: and commas, all here.",
    "Tabs\tand\nnewlines\r\nand   many   spaces.",
    "   leading and trailing spaces   ",
    "x\u00b2 + y\u00b3 = z\u00b2",
    "\u0661.\u0665 is one and a half.",
    "The year 1999. 2000 came next.",
    "Call 555-0199 or +1 (800) 555-0100.",
    "Temperatures of -5\u00b0C and 23\u00b0F.",
    "An ellipsis\u2026 then more text\u2026",
    "Question? Answer! Statement.",
    "lowercase start, no end",
    "Numbers like 1,000,000 and 0.001.",
    "He said: \u201cIt\u2019s fine\u201d; she didn\u2019t agree.",
    "(Parenthetical remark.) [Bracketed one.]",
    "Trailing comma,",
    "Trailing dash -",
    'Ends with a quote."',
    "URL example.com/path?x=1 and email a@b.co.",
    "C++ and C# and F# are languages.",
    "\u00bfQu\u00e9 tal? \u00a1Muy bien!",
    "Ich m\u00f6chte \u00fcber die Br\u00fccke gehen.",
    "Je n\u2019ai pas le temps ; d\u00e9sol\u00e9 !",
    "Una frase en espa\u00f1ol, con \u00f1 y acentos.",
    "Ok.",
    "A.",
    "...",
    "!",
    "-",
    "'",
    "  ",
]


def texts(count: int = 320, seed: int = 0) -> list[str]:
    """The base texts, then combinations of them, long paragraphs and runs of words with no punctuation."""
    rng = random.Random(seed)
    sentences = [t for t in BASE if t.strip(" .!-'")]
    out = list(BASE)
    while len(out) < count - 40:
        out.append(" ".join(rng.sample(sentences, rng.randint(2, 4))))
    words = " ".join(sentences).replace(".", "").replace(",", "").split()
    while len(out) < count - 20:
        out.append(" ".join(rng.sample(sentences, min(len(sentences), rng.randint(8, 14)))))
    while len(out) < count:
        run = [rng.choice(words) for _ in range(rng.randint(60, 120))]
        if rng.random() < 0.5:  # commas to split an oversized sentence at
            for i in range(10, len(run), 17):
                run[i] += ","
        out.append(" ".join(run))
    return out
