"""Write the built-in default prompt suite, ``gate/suites/default.jsonl``.

All prompt text here was written for specguard.  The slices are chosen so that
speculative decoding behaves differently on each: prose and grammar close to
the demo models' training domain (high draft agreement), code and questions
further away, a long-context slice (every prompt at least 512 tokens of the
demo tokenizer), and an adversarial slice (shuffled words, rare symbols, mixed
scripts) on which the draft tracks the target poorly.

    python scripts/make_default_suite.py            # writes the file
    python scripts/make_default_suite.py --check    # fails if the file is stale
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "gate" / "suites" / "default.jsonl"

PROSE = [
    "The \"while\" statement repeats a block of code for as long as its condition",
    "When a function is called, the arguments are evaluated from left to right and",
    "A module is imported only once per interpreter session; later imports of the same name",
    "The \"with\" statement wraps the execution of a block so that the context manager",
    "Exceptions raised inside a \"try\" clause are matched against each \"except\" clause in",
    "Class attributes are looked up on the instance first, and if no instance attribute",
    "An iterator is an object that returns its items one at a time; when no items remain,",
    "The default value of a parameter is evaluated once, when the function definition",
    "A generator function returns an iterator that produces values lazily, so that",
]

GRAMMAR = [
    "The syntax of the \"for\" statement is:\n\n   for_stmt ::=",
    "The \"return\" statement may only occur inside a function definition:\n\n   return_stmt ::=",
    "Conditional expressions have the lowest priority of all operations:\n\n   conditional_expression ::=",
    "A lambda expression creates an anonymous function:\n\n   lambda_expr ::=",
    "The \"del\" statement removes the binding of one or more names:\n\n   del_stmt ::=",
    "Slicings select a range of items in a sequence object:\n\n   slicing ::=",
    "The \"global\" statement declares names that refer to module-level bindings:\n\n   global_stmt ::=",
    "Comparisons can be chained arbitrarily, as in the grammar:\n\n   comparison ::=",
]

CODE = [
    "   >>> def greet(name):\n   ...     return",
    "   class Stack:\n       def __init__(self):\n           self.items = []\n\n       def push(self, item):\n",
    "   >>> numbers = [3, 1, 4, 1, 5]\n   >>> sorted(numbers)\n",
    "   try:\n       value = int(text)\n   except ValueError:\n",
    "   with open(\"data.txt\") as handle:\n       for line in handle:\n",
    "   >>> d = {\"a\": 1, \"b\": 2}\n   >>> for key, value in d.items():\n   ...     print(",
    "   def fib(n):\n       a, b = 0, 1\n       while a < n:\n",
    "   >>> import math\n   >>> math.sqrt(16)\n",
]

QUESTIONS = [
    "Question: What does the \"break\" statement do inside a loop?\nAnswer:",
    "Question: How is a keyword argument different from a positional argument?\nAnswer:",
    "Question: When is the \"else\" clause of a \"for\" loop executed?\nAnswer:",
    "Question: What happens when an exception is not handled by any \"except\" clause?\nAnswer:",
    "Question: Why should a mutable object not be used as a default argument value?\nAnswer:",
    "Question: What is the difference between \"is\" and \"==\"?\nAnswer:",
    "Question: How does a class inherit methods from its base class?\nAnswer:",
    "Question: What does the \"nonlocal\" statement change about name binding?\nAnswer:",
]

# Paragraphs for the long-context slice: each long prompt concatenates several of
# them (a fixed, seeded order) and ends with the start of a sentence to continue.
PARAGRAPHS = [
    "Every value in a running program is an object, and every object has an identity, a type and a "
    "value. The identity never changes once the object has been created; you may think of it as the "
    "address of the object in memory. The type determines the operations that the object supports and "
    "also defines the possible values for objects of that type. Some objects can change their value "
    "after creation and are called mutable; others, such as numbers, strings and tuples, cannot and are "
    "called immutable.",
    "Names refer to objects. A name is bound to an object by an assignment, by an import, by a function "
    "or class definition, or by the target of a loop. The set of names visible at a point in the code is "
    "called its scope. When a name is used, it is looked up in the innermost enclosing scope first, then "
    "in the enclosing function scopes, then in the module's global names, and finally among the built-in "
    "names. If the name is not found anywhere, a NameError exception is raised.",
    "A function definition is an executable statement. Its execution binds the function name in the "
    "current local namespace to a function object, which wraps the executable code of the function body "
    "together with a reference to the current global namespace. The body is not executed when the "
    "definition runs; it is executed only when the function is called, and each call creates a fresh "
    "local namespace for the names bound inside the body.",
    "Exceptions are a means of breaking out of the normal flow of control to handle errors or other "
    "exceptional conditions. An exception is raised at the point where the error is detected; it may be "
    "handled by the surrounding code block or by any code block that directly or indirectly invoked the "
    "code block where the error occurred. When an exception is not handled at all, the interpreter "
    "terminates the program or returns to its interactive main loop and prints a stack traceback.",
    "A class definition creates a new class object. The class body is executed in a new namespace, and "
    "the names bound there become the attributes of the class. Instances are created by calling the class "
    "object, which normally calls the special method __init__ with the new instance as its first argument. "
    "Methods are functions defined in the class body; when looked up through an instance, they are bound "
    "to that instance, which is why the first parameter is conventionally called self.",
    "The for statement iterates over the items of any iterable object, in the order that the iterable "
    "produces them. The iterable expression is evaluated once, and an iterator is created from its result. "
    "The suite is then executed once for each item provided by the iterator, with the item assigned to the "
    "target list. When the iterator is exhausted, the suite in the else clause, if present, is executed, "
    "and the loop terminates; a break statement in the suite skips the else clause.",
    "Comparison operators compare the values of two objects. The operators less than, greater than, equal, "
    "greater or equal, less or equal and not equal all have the same priority, which is lower than that of "
    "any arithmetic, shifting or bitwise operation. Unlike in some other languages, comparisons can be "
    "chained, so that an expression such as a < b < c has the interpretation that is conventional in "
    "mathematics, and each operand is evaluated at most once.",
    "A module is a file containing definitions and statements. The file name is the module name with the "
    "suffix .py added. Within a module, the module's name is available as the value of the global variable "
    "__name__. When a module is imported for the first time, its code is executed from top to bottom, and "
    "the resulting namespace is stored in a table of loaded modules so that later imports of the same "
    "module return the existing object instead of running the code again.",
    "Generators are functions that use the yield expression. Calling a generator function does not run its "
    "body; it returns a generator iterator. Each time the next value is requested, execution resumes where "
    "it left off and runs until the next yield expression, whose operand becomes the value produced. The "
    "local state, including the values of local names and the point of execution, is retained between "
    "requests, which makes generators a convenient way to write lazy sequences.",
    "The with statement is used to wrap the execution of a block with methods defined by a context manager. "
    "The context expression is evaluated to obtain a context manager, whose __enter__ method is called "
    "before the block runs. The __exit__ method is always called afterwards, even if the block raised an "
    "exception, which makes the statement a reliable way to release resources such as files, locks and "
    "network connections without writing an explicit try and finally clause.",
]

LONG_ENDINGS = [
    "In summary, the rule that matters most when reading such code is that",
    "Taken together, these rules explain why a program that",
    "A common mistake when learning these rules is to assume that",
    "The next section describes how the interpreter",
    "For example, consider a function that",
    "It follows from the definitions above that",
    "To see how these pieces fit together, note that",
    "This is why the documentation recommends that",
]

SHUFFLE_SOURCES = PROSE[:4] + [
    "the value of the expression is returned to the caller after the function finishes",
    "a list comprehension builds a new list from the items of another iterable",
    "the import system searches each entry of the module search path in order",
    "keyword arguments must follow positional arguments in a call",
]

SYMBOL_LINES = [
    "\u2234 \u2200x \u2203y: x \u2282 y \u2227 \u00ac(y \u2286 x) \u21d2 \u2207\u00b2\u03c6 \u2248 \u222e\u03c9 \u2295",
    "\u263a\u2602\u2603\u2604\u2605\u2606\u2607\u2608 \u2609\u260a\u260b \u2620\u2622\u2623 \u269b\u269c \u2693",
    "\u00a7\u00b6\u2020\u2021 \u2030 \u2031 \u2116 \u2122 \u2118 \u211e \u2127 \u212e \u2132 \u2141",
    "\U0001f680\U0001f9ea\U0001f9ec \U0001f52d\U0001f4d0 \U0001f9ee\U0001f9f2 \U0001f300\U0001f308",
]

MIXED_SCRIPTS = [
    "Der Interpreter \u043f\u0440\u043e\u0432\u0435\u0440\u044f\u0435\u0442 \u6bcf\u4e2a\u53d8\u91cf "
    "\u03ba\u03b1\u03b9 \u0627\u0644\u062f\u0627\u0644\u0629 returns",
    "\u3053\u306e\u95a2\u6570 \u0432\u043e\u0437\u0432\u0440\u0430\u0449\u0430\u0435\u0442 "
    "\u05e2\u05e8\u05da \u0915\u093e \u092e\u093e\u0928 when the loop",
    "\ud55c\uad6d\uc5b4 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 "
    "\u0570\u0561\u0575\u0565\u0580\u0565\u0576 the module",
    "\u00c9l m\u00f3dulo \u0161t\u00e1t\u00fd \u00f8re \u0142\u0105ka \u00df\u00fc\u00f1 "
    "\u0111\u01b0\u1edd\u0e07 \u1e9e\u0254\u0259 imports",
]


def _long_prompt(rng: random.Random, ending: str) -> str:
    paras = PARAGRAPHS[:]
    rng.shuffle(paras)
    return "\n\n".join(paras[:5]) + "\n\n" + ending


def _shuffled(rng: random.Random, text: str) -> str:
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def build() -> list[dict]:
    rng = random.Random(20261129)
    rows: list[dict] = []

    def add(slice_: str, prompts: list[str], **extra) -> None:
        for i, p in enumerate(prompts):
            rows.append({"id": f"{slice_}-{i:02d}", "slice": slice_, "prompt": p, **extra})

    add("prose", PROSE)
    add("grammar", GRAMMAR)
    add("code", CODE)
    add("questions", QUESTIONS)
    add("long-context", [_long_prompt(rng, e) for e in LONG_ENDINGS])
    adversarial = [_shuffled(rng, s) for s in SHUFFLE_SOURCES[:4]] + SYMBOL_LINES[:2] + MIXED_SCRIPTS[:2]
    adversarial += [s.swapcase() for s in SHUFFLE_SOURCES[4:6]] + SYMBOL_LINES[2:] + MIXED_SCRIPTS[2:]
    add("adversarial", adversarial)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if the shipped file differs")
    args = ap.parse_args()
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in build())
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run python scripts/make_default_suite.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({text.count(chr(10))} prompts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
