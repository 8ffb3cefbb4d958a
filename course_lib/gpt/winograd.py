r"""Winograd-style sentence pairs written for this course, and how a model resolves "it" (chapter 11).

Each pair is one sentence with two candidate nouns and the pronoun "it", in two versions that
differ in one word (the *cue*) and so flip the antecedent (Levesque et al., 2012, "The Winograd
Schema Challenge"). The sentences below were written for the course, not taken from a
benchmark, so a pretrained model cannot have memorised them. In each, the first noun comes
first and the second nearer the pronoun; the first cue points to the first noun, the second
cue to the second, so "the nearest noun" and "the first noun" are each right on exactly half.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "PAIRS",
    "SUFFIX",
    "Coreference",
    "Item",
    "candidate_spans",
    "items",
    "noun_attention",
    "resolve",
    "sentence_rows",
    "split_halves",
]

# Appended to each sentence so that the model must name the noun at its last token.
SUFFIX = ' In that sentence, "it" means the'

# One pair a line: the sentence with {} for the cue | the cue for the first noun | the cue for
# the second | the first noun | the second noun.
_TABLE = """\
The trophy did not fit in the suitcase because it was too {}. | big | small | trophy | suitcase
The ball broke the window because it was {}. | heavy | thin | ball | window
The dog chased the cat because it was {}. | hungry | fast | dog | cat
The table would not go through the door because it was too {}. | wide | narrow | table | door
The bottle did not fit in the box because it was too {}. | tall | short | bottle | box
The car passed the truck because it was {}. | faster | slower | car | truck
The ice melted on the stove because it was {}. | soft | hot | ice | stove
The rope held the boat because it was {}. | strong | light | rope | boat
The hammer cracked the tile because it was {}. | heavy | brittle | hammer | tile
The sofa did not fit in the room because it was too {}. | long | small | sofa | room
The cup fell off the shelf because it was {}. | unbalanced | tilted | cup | shelf
The horse pulled the cart easily because it was {}. | strong | empty | horse | cart
The knife could not cut the bread because it was {}. | blunt | frozen | knife | bread
The phone would not charge from the cable because it was {}. | dead | broken | phone | cable
The kite got stuck in the tree because it was {}. | light | tall | kite | tree
The book did not fit on the shelf because it was too {}. | thick | full | book | shelf
The cat hid from the storm because it was {}. | scared | loud | cat | storm
The boat sank in the lake because it was {}. | leaking | deep | boat | lake
The pen would not write on the paper because it was {}. | empty | wet | pen | paper
The shoe did not fit the foot because it was too {}. | narrow | swollen | shoe | foot
The plant grew toward the window because it was {}. | alive | bright | plant | window
The bridge could not carry the lorry because it was too {}. | weak | heavy | bridge | lorry
The fish could not swim in the pond because it was too {}. | big | shallow | fish | pond
The lamp could not light the hall because it was too {}. | dim | large | lamp | hall
The key would not turn in the lock because it was {}. | bent | rusty | key | lock
The wolf caught the rabbit because it was {}. | quick | slow | wolf | rabbit
The parcel did not fit through the slot because it was too {}. | bulky | tiny | parcel | slot
The chair broke under the statue because it was {}. | fragile | massive | chair | statue
The bag would not close over the coat because it was too {}. | small | bulky | bag | coat
The drone could not lift the crate because it was too {}. | weak | heavy | drone | crate
The stone sank in the river because it was {}. | dense | calm | stone | river
The blanket did not cover the bed because it was too {}. | short | wide | blanket | bed
The owl watched the mouse because it was {}. | hungry | moving | owl | mouse
The bucket could not hold the water because it was {}. | cracked | boiling | bucket | water
The truck could not enter the tunnel because it was too {}. | high | low | truck | tunnel
The ladder did not reach the roof because it was too {}. | short | high | ladder | roof
The envelope would not hold the letter because it was too {}. | small | thick | envelope | letter
The candle lit the cave because it was {}. | burning | dark | candle | cave
The glass cracked in the oven because it was {}. | thin | hot | glass | oven
The tent blew off the hill because it was {}. | loose | windy | tent | hill
The train stopped at the station because it was {}. | late | open | train | station
The apple rolled off the plate because it was {}. | round | tilted | apple | plate
The mug would not fit under the tap because it was too {}. | tall | low | mug | tap
The bird left the nest because it was {}. | grown | damaged | bird | nest
The screw would not go into the wall because it was {}. | blunt | solid | screw | wall
The balloon burst on the fence because it was {}. | inflated | sharp | balloon | fence
The boot left a mark on the floor because it was {}. | muddy | polished | boot | floor
The clock fell from the wall because it was {}. | heavy | damp | clock | wall
The pot would not sit on the burner because it was too {}. | big | small | pot | burner
The coin slipped through the grate because it was {}. | small | wide | coin | grate
The puppy could not climb the step because it was too {}. | little | steep | puppy | step
The bus could not cross the bridge because it was too {}. | heavy | weak | bus | bridge
The sheet would not fit in the printer because it was too {}. | large | narrow | sheet | printer
The tree shaded the house because it was {}. | leafy | low | tree | house
The ship could not enter the harbour because it was too {}. | large | shallow | ship | harbour
The magnet did not hold the spoon because it was too {}. | weak | heavy | magnet | spoon
The jar would not fit in the fridge because it was too {}. | tall | full | jar | fridge
The snake could not get into the hole because it was too {}. | fat | narrow | snake | hole
The plane could not land on the field because it was too {}. | fast | short | plane | field
The sock would not go over the shoe because it was too {}. | tight | big | sock | shoe
The brush could not paint the fence because it was {}. | dry | wet | brush | fence
The vase broke on the tiles because it was {}. | delicate | hard | vase | tiles
"""
PAIRS = tuple(tuple(part.strip() for part in line.split("|")) for line in _TABLE.splitlines())


@dataclass(frozen=True)
class Item:
    """One sentence: its text, its two candidate nouns (first, second) and which is meant
    (``answer``: 0 first, 1 second); ``pair`` is its pair's index."""

    text: str
    nouns: tuple[str, str]
    answer: int
    pair: int


def items(pairs=PAIRS) -> list[Item]:
    """Both versions of every pair, in pair order: ``2 * len(pairs)`` items."""
    out = []
    for p, (template, cue_a, cue_b, first, second) in enumerate(pairs):
        out.append(Item(template.format(cue_a), (first, second), 0, p))
        out.append(Item(template.format(cue_b), (first, second), 1, p))
    return out


def candidate_spans(pieces: list[str], noun: str) -> list[int]:
    """Token positions of the first occurrence of ``noun`` in ``pieces`` (the tokenizer's
    ``show``: "␣" marks a leading space), matched on the concatenated text."""
    text = ""
    starts = []
    for piece in pieces:
        starts.append(len(text))
        text += piece.replace("␣", " ")
    at = text.find(" " + noun)
    if at < 0:
        raise ValueError(f"{noun!r} is not in {text!r}")
    lo, hi = at + 1, at + 1 + len(noun)
    ends = starts[1:] + [len(text)]
    return [i for i, (s, e) in enumerate(zip(starts, ends)) if s < hi and e > lo]


def noun_attention(weights: torch.Tensor, query: int, spans) -> torch.Tensor:
    """``[L, H, 2]``: each head's attention from position ``query`` to each candidate's
    tokens (summed over the noun's tokens), from ``weights`` = per layer ``[1, H, N, N]``."""
    w = torch.stack([x[0, :, query] for x in weights])  # (L, H, N)
    return torch.stack([w[..., list(s)].sum(-1) for s in spans], dim=-1)  # (L, H, 2)


def sentence_rows(pairs) -> list[int]:
    """The rows of :func:`items` (both versions of each pair) for pair indices ``pairs``."""
    return [2 * p + v for p in pairs for v in (0, 1)]


def split_halves(n_pairs: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Pairs shuffled by ``seed`` and cut in two: (selection pairs, test pairs)."""
    order = torch.randperm(n_pairs, generator=torch.Generator().manual_seed(seed)).tolist()
    half = n_pairs // 2
    return sorted(order[:half]), sorted(order[half:])


@dataclass
class Coreference:
    """What :func:`resolve` measures on ``2P`` sentences (:func:`items` order): per sentence,
    layer and head, the attention to each candidate noun from "it" (``at_it [2P, L, H, 2]``) and
    from the last token of the suffix (``at_end``); the model's own choice (``choice [2P]``:
    1 when it gives the second noun the higher probability next); ``answers [2P]``."""

    at_it: torch.Tensor
    at_end: torch.Tensor
    choice: torch.Tensor
    answers: torch.Tensor

    def right(self, where: str = "end") -> torch.Tensor:
        """``[2P, L, H]``: 1 where the head puts more attention on the right noun."""
        att = self.at_end if where == "end" else self.at_it  # (2P, L, H, 2)
        return ((att[..., 1] > att[..., 0]).long() == self.answers[:, None, None]).float()


def resolve(model, tok, sentences: list[Item] | None = None, suffix: str = SUFFIX) -> Coreference:
    """Run ``model`` once on every sentence + ``suffix`` (right-padded: causal, so harmless)
    and read, per head, where "it" and the last token look, and which noun the model names."""
    from .claims import run_model

    sentences = items() if sentences is None else sentences
    encoded = [tok.encode(it.text + suffix) for it in sentences]
    width = max(len(e) for e in encoded)
    batch = torch.stack([torch.cat([e, e.new_zeros(width - len(e))]) for e in encoded])  # (2P, N)
    run = run_model(model, batch, need_weights=True)
    at_it, at_end, choice = [], [], []
    for b, (it, e) in enumerate(zip(sentences, encoded)):
        pieces = tok.show(e)
        spans = [candidate_spans(pieces, noun) for noun in it.nouns]
        weights = [w[b : b + 1] for w in run.weights]  # L x (1, H, N, N)
        at_it.append(noun_attention(weights, candidate_spans(pieces, "it")[0], spans))
        at_end.append(noun_attention(weights, len(e) - 1, spans))  # (L, H, 2)
        logp = torch.log_softmax(run.logits[b, len(e) - 1].double(), -1)  # (V,)
        first, second = (tok.encode(" " + noun)[0] for noun in it.nouns)
        choice.append(int(logp[second] > logp[first]))
    return Coreference(
        torch.stack(at_it),  # (2P, L, H, 2)
        torch.stack(at_end),  # (2P, L, H, 2)
        torch.tensor(choice),  # (2P,)
        torch.tensor([it.answer for it in sentences]),  # (2P,)
    )
