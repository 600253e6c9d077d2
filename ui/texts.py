"""Words shown in the app: the legend, the explanation for newcomers, the example prompts."""
from __future__ import annotations

from mirror_sd.models.precision import draft_precisions, target_precisions

# kind -> (label, tooltip). Order = legend order. Colours (ui/palette.py TOKENS, hue families no
# bar on the page uses): green = a drafted token the target accepted, blue = accepted from a
# window ready early (Mirror-SD's hit), indigo hatched = from a hit whose branch was ready only
# after the verdict (a late hit), amber = accepted from a window redrafted after a miss,
# red = the target's own token after a rejection, purple = the bonus token, none = the target alone.
LEGEND = {
    "accepted": ("accepted draft",
                 "The draft model proposed this token and the target agreed: it cost no "
                 "target forward of its own. In Mirror-SD: from a window drafted after the "
                 "verdict in a step whose lanes ran in turn (neither a hit nor a miss)."),
    "hit": ("accepted, from a branch hit, ready by the verdict",
            "Accepted, from a window the draft wrote while the target was still verifying the "
            "previous one (Mirror-SD's branch matched the verdict: a branch hit), ready by the "
            "verdict: the target did not wait for it."),
    "late": ("accepted, from a branch hit, ready after the verdict (late)",
             "Accepted, from a window the draft began while the target was still verifying the "
             "previous one (a branch hit) but finished after the verdict: the target waited for it "
             "(a late hit; the step's line says how long, “late hit +n ms”)."),
    "fallback": ("accepted, after a branch miss (window redrafted)",
                 "Accepted, from a window the draft had to write after the verdict because no "
                 "prepared branch matched it (a branch miss: the target waited for it)."),
    "correction": ("target's token after a rejection",
                   "The target rejected a drafted token here and wrote its own instead (from "
                   "the same verify forward)."),
    "bonus": ("bonus token",
              "The target accepted the whole window and added one more token of its own for "
              "free, from the same forward pass."),
    "plain": ("target alone",
              "Written by the target alone, one forward pass for one token: every AR token, and "
              "the token of an SD or Mirror-SD step that drafted nothing."),
}
# the legend's groups: (title, ((kind, its short name in the group), ...))
LEGEND_GROUPS = (("drafted, kept", (("accepted", "accepted draft"), ("hit", "from a branch hit, ready by the verdict"),
                                    ("late", "from a branch hit, ready after the verdict (late)"),
                                    ("fallback", "after a branch miss (redrafted)"))),
                 ("the target's own token", (("correction", "after a rejection"), ("bonus", "bonus token"),
                                             ("plain", "alone (AR, or no draft)"))))
# marks that are not a kind: css class -> (label, tooltip)
LEGEND_MARKS = {
    "msd-tok k-accepted ws": ("whitespace",
                              "A token of spaces or a line break: no coloured box, a dotted line "
                              "in its colour, a faint · for each space and ↵ for a line break "
                              "(marks only: copied text keeps the real spaces and line breaks)."),
}

# word -> definition, shown on hover wherever the word appears (abbr title=)
GLOSSARY = {
    "gamma": "γ (gamma): how many tokens the draft writes per window before the target checks them.",
    "kappa": "κ (kappa): how many of the early exit's top guesses per position go to the draft.",
    "exit layer": ("ℓₑ, the early-exit layer: the target layer after which Mirror-SD reads the "
                   "target's likely next tokens (its final norm and LM head applied half-way), "
                   "while the remaining layers still run."),
    "exit lens": ("A small trained correction applied to the exit layer's hidden state before the "
                  "LM head, so the half-way guesses match the target's final tokens more often."),
    "root": ("A branch's root (j, v): the guess that the target keeps the first j drafted tokens "
             "and then writes v; the draft rolls a whole window out from there in advance."),
    "score": ("A root's score: how likely the verdict is to land there, from the draft's own "
              "probabilities and the early exit's; the best-scored roots get rolled out."),
    "tau": "τ: tokens committed per target forward (AR: 1).",
    "hit": ("A branch hit: at the end of a Mirror-SD step the target's verdict (how many drafted tokens "
            "it kept, and its own next token) matched a branch the draft had already written "
            "while the target was verifying, so the next window started early. It is about the "
            "branch, not the tokens kept: a step that kept none of its window still hits when a "
            "branch began at the target's own token. A late hit: the draft finished that branch "
            "after the verdict (it is slower than the rest of the target), so the target waited for "
            "it, “late hit +n ms”, though less than for a whole new window; still a hit in every count."),
    "fallback": ("A branch miss: no branch the draft had written during the step matched the verdict, "
                 "so the draft wrote the next window after it while the target waited."),
    "ttft": ("Time to first token: from the run's start (the prompt goes in) to its first "
             "committed token. SD and Mirror-SD draft and verify their first window inside it, "
             "both the same way."),
    "decode": ("Decode speed: the tokens committed after the first commit, divided by the time "
               "after it."),
    "e2e": "End to end: all tokens divided by the run's wall time (start to last token).",
    "speedup": ("This method's speed divided by AR's (the target alone), in decode and end to end: "
                "the speeds shown (over interleaved runs, the median speeds) divided by AR's. "
                "Above 1.00×: faster than AR."),
    "verify step": ("One target forward of a speculative run: over a drafted window, keeping the "
                    "tokens it agrees with plus one of its own. A step whose window is empty (a priced "
                    "window that drafted nothing) is a plain target forward for one token; the card "
                    "counts it here and says how many. Tokens per forward = all tokens / target forwards."),
    "window": ("A window: the drafted tokens the target checks in one verify step. Its length "
               "can change from step to step (the draft stops early when unsure)."),
    "priced window": ("SD's default window: each step it drafts as many tokens as pay at the costs "
                      "measured on this machine (a draft forward against a target forward), and none "
                      "where drafting would not pay. “SD (fixed windows)”, a variant to tick, drafts "
                      "γ tokens every step instead."),
    "prompt lookup": ("Where the text repeats itself (code, a name already written), SD's window takes "
                      "the tokens that followed the same words earlier in the prompt or the answer, at "
                      "no model's cost; the draft model writes the window where nothing matches. The "
                      "target checks these tokens as any others, so the output does not change."),
    "rejection": ("A rejection: the target disagreed with a drafted token, wrote its own there "
                  "and dropped the rest of the window (shown struck through in the text)."),
    "exposed": ("Draft time after the first token: exposed while the target waited for it, "
                "hidden while it ran beside the target's own work."),
}

HOW_IN_NOTATION = """
Bhendawade et al. 2025. Target with N layers, early exit at layer
ℓₑ, window of γ drafted tokens d₁…d_γ with draft probabilities q and target probabilities p.
Per step: the target runs layers 1..ℓₑ over [yₙ, d₁…d_γ]; the exit head gives the top-κ tokens
per position, M_t; then, in parallel, the target runs layers ℓₑ+1..N while the draft rolls out
γ-token branches from the most likely roots (j, v) ∈ M_t (at most *branch budget* of them).
Verification accepts dᵢ while dᵢ = argmax pᵢ (greedy) or with probability min(1, pᵢ(dᵢ)/qᵢ(dᵢ))
(sampling), commits d₁…d_A and the target's token c, and reuses the branch rooted at (A, c) if
it exists. Step time: T_target[1..ℓₑ] + max(T_target[ℓₑ+1..N], T_draft) instead of
T_draft + T_target.
"""

# task -> prompt. A prompt with "User:" / "Assistant:" lines is a multi-turn chat.
EXAMPLES = {
    "Code": "Write a Python function that checks whether a string is a palindrome. Reply with the code only.",
    "Math": ("A train travels 120 km in 1.5 hours and then 80 km in 1 hour. What is its "
             "average speed over the whole trip? Reason step by step."),
    "Summarization": (
        "Summarize in two sentences: The city council voted on Tuesday to turn the old rail "
        "yard into a public park. The plan adds 12 hectares of green space, a playground and "
        "a cycling path that links two neighbourhoods. Construction starts next spring and is "
        "paid for by a regional grant and a small increase in parking fees."),
    "Translation": ("Translate into French: The weather is lovely today, so we are going for a "
                    "walk along the river after lunch."),
    "QA": "What is the difference between a process and a thread?",
    "Multi-turn chat": (
        "User: I'm visiting Japan in April. Any tips?\n"
        "Assistant: April is cherry blossom season: book hotels early and expect crowds in "
        "Kyoto.\n"
        "User: What should I pack?"),
}
DEFAULT_EXAMPLE = "Code"


def parse_prompt(text: str) -> str | list[dict]:
    """A plain prompt, or a list of chat messages when the text uses User:/Assistant: lines."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].lower().startswith("user:"):
        return text.strip()
    messages: list[dict] = []
    for line in lines:
        low = line.lower()
        for role in ("user", "assistant", "system"):
            if low.startswith(role + ":"):
                messages.append({"role": role, "content": line[len(role) + 1:].strip()})
                break
        else:  # a continuation line of the current message
            messages[-1]["content"] += "\n" + line
    return messages


# Precision choices, from the registry (menu order)
TARGET_PRECISIONS = target_precisions()
DRAFT_PRECISIONS = draft_precisions()
PRECISION_INFO = (
    "int8 (CPU): int8 weights, each token's activations quantized on its own and row-exact "
    "attention, so verifying k tokens gives bit for bit what decoding them one by one gives: "
    "~4x faster than fp32 here (an AVX2 kernel built on first use, about a minute once; "
    "fbgemm where it cannot build). int4 (CPU): 4-bit weights in groups of 32, int8 LM head, "
    "row-exact like int8; a little faster again, a little further from fp32 (AVX2 kernel only). "
    "fp16w: fp16 weights, fp32 math (~2x). int8-dyn: fbgemm's "
    "one activation scale per batch couples the rows: measured on the 1.5B target, a verify "
    "forward flipped 2 of 8 greedy tokens against one-by-one decoding, so speculative output "
    "can differ from its baseline (the summary counts it). fp16 needs a GPU. The AR baseline "
    "always runs this same target.")
CPU_PRECISION_TIP = ("Tip: this ran in fp32 on a CPU. Precision int8 (under “Model pair and devices”) "
                     "runs the same comparison about 4x faster (AR int8 4.10x AR fp32, measured on "
                     "2 cores), every method on the same int8 weights; its kernel builds on first "
                     "use, about a minute once.")
DRAFT_PRECISION_INFO = ("int4 and int8 (CPU, AVX2 kernels): the fastest drafts here; int4 "
                        "reads 0.6 of int8's weight bytes. Any draft keeps the output the "
                        "target's own, since acceptance checks every token.")
