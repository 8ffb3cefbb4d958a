r"""The sentences of chapter 11's coreference experiments, written for the course.

Two sets, each in a text table, one pair (or group) a line, fields separated by ``|``:

* ``WINOGRAD_PAIRS``: Winograd-style pairs (Levesque et al., 2012): one sentence with two
  candidate nouns and the pronoun "it", in two versions that differ in one word (the *cue*,
  after the pronoun) and so flip the antecedent. Fields: the sentence with ``{}`` for the cue |
  the cue for the first noun | the cue for the second | the first noun | the second noun | the
  pronoun | the audit note (below). Code that uses the pairs reads the first six fields.
* ``AGREEMENT_GROUPS``: sentences where the pronoun itself decides the antecedent, by number
  (it / they: exactly one of the two nouns is plural) or by gender (he / she: two people with
  gendered names or nouns). Fields: the sentence with ``{}`` for the pronoun | the pronoun that
  means the first noun | the pronoun that means the second | the first noun | the second noun.

In every Winograd pair and every agreement group the first noun comes first, the second nearer
the pronoun, and the pronoun after both; the first version points to the first noun, the second
to the second, so "the first noun" and "the nearest noun" are each right on exactly half.

**How the Winograd pairs were audited.** A wrong label pulls every accuracy towards one half,
so each pair was checked, by reading, against this procedure:

1. For each version, put each candidate in the pronoun's place ("The trophy did not fit in the
   suitcase because *the trophy* was too big" / "... because *the suitcase* was too big").
   A version passes only when exactly one substitution is the natural reading and the other is
   clearly implausible or self-contradictory; where both readings can be defended, it fails.
2. A pair passes when both versions pass with opposite antecedents.
3. The cue alone must not name the answer by association, independent of the sentence: both
   cues are adjectives that could in principle describe either noun ("leafy" can only be the
   tree, "windy" only the hill; such a cue fails the pair).
4. Plain grammar: the pronoun "it" must be able to take either noun (a plural noun such as
   "tiles" fails the pair, since number alone would then decide it).

Of the 62 pairs, 26 passed as written (note ``ok``) and 36 were rewritten or replaced (note
``rewritten: <old cue or sentence> -- <why>``), a new cue, a new frame or new nouns, and the
new version was put through the same four steps. Then a second, blind reading: every one of
the 124 sentences, shuffled, with its two candidates in random order and without the key, was
read by a reader who chose the antecedent and marked it clear, ambiguous or odd. It agreed with
the key on all 124 and marked one version ambiguous (a screw "too soft" for a wall: a soft wall
also lets a screw slip); that pair was replaced and is the only one with a note naming the blind
reading. The model the chapter tests (SmolLM2) took no part in either reading: that would make
the chapter's test circular.

**The agreement groups.** The words after the pronoun are neutral: true of either noun and
grammatical with either pronoun (past-tense verbs: "it stopped" / "they stopped"; no "was" /
"were"). There are 13 sentence frames (a coordination, "until", "while", "after", "before",
"when", "although", "as", a relative clause with "where", "but soon", "so soon" ...), each used
for four groups: two by number, two by gender; in one of each the plural (or female) noun comes
first, in the other second, so no rule from the pronoun to a position works. One reading is
left open: a plural "they" could, in principle, take both nouns together (a split antecedent);
the groups count the plural noun as the answer.
"""

from __future__ import annotations

__all__ = ["AGREEMENT_GROUPS", "WINOGRAD_PAIRS"]

_WINOGRAD = """\
The trophy did not fit in the suitcase because it was too {}. | big | small | trophy | suitcase | it | ok
The ball broke the window because it was {}. | heavy | fragile | ball | window | it | rewritten: heavy/thin -- "thin" does not describe a ball
The dog could not catch the cat because it was too {}. | old | quick | dog | cat | it | rewritten: "chased", hungry/fast -- a fast cat does not explain a chase
The table would not go through the door because it was too {}. | wide | narrow | table | door | it | ok
The bottle did not fit in the box because it was too {}. | tall | short | bottle | box | it | ok
The car passed the truck because it was {}. | faster | slower | car | truck | it | ok
The ice melted quickly on the stove because it was {}. | thin | hot | ice | stove | it | rewritten: soft/hot -- soft ice does not explain melting
The rope held the boat because it was {}. | strong | light | rope | boat | it | ok
The hammer cracked the tile because it was {}. | heavy | brittle | hammer | tile | it | ok
The sofa did not fit in the room because it was too {}. | long | small | sofa | room | it | ok
The cup did not fit in the drawer because it was too {}. | tall | shallow | cup | drawer | it | rewritten: "fell off the shelf", unbalanced/tilted -- either can tilt
The horse pulled the cart easily because it was {}. | strong | light | horse | cart | it | rewritten: strong/empty -- "empty" does not describe a horse
The knife could not cut the bread because it was {}. | cheap | frozen | knife | bread | it | rewritten: blunt/frozen -- "blunt" names the knife by itself
The phone did not fit in the pocket because it was too {}. | large | small | phone | pocket | it | rewritten: "charge from the cable", dead/broken -- either fails
The kite could not rise above the tree because it was too {}. | heavy | tall | kite | tree | it | rewritten: "got stuck in", light/tall -- lightness explains nothing
The book did not fit on the shelf because it was too {}. | thick | narrow | book | shelf | it | rewritten: thick/full -- "full" does not describe a book
The mouse hid from the cat because it was {}. | scared | angry | mouse | cat | it | rewritten: "cat hid from the storm" -- a storm cannot be scared
The boat ran aground in the lake because it was too {}. | heavy | shallow | boat | lake | it | rewritten: "sank", leaking/deep -- a deep lake does not sink a boat
The pen would not write on the paper because it was {}. | empty | wet | pen | paper | it | ok
The shoe would not go on the foot because it was too {}. | narrow | swollen | shoe | foot | it | rewritten: "did not fit" -- a too narrow foot also fits badly
The plant did not fit on the windowsill because it was too {}. | big | narrow | plant | windowsill | it | rewritten: "grew toward the window", alive/bright -- "alive" explains nothing
The bridge could not carry the lorry because it was too {}. | weak | heavy | bridge | lorry | it | ok
The fish could not swim in the pond because it was too {}. | big | small | fish | pond | it | rewritten: big/shallow -- "shallow" does not describe a fish
The lamp could not light the hall because it was too {}. | dim | large | lamp | hall | it | ok
The key would not fit in the lock because it was too {}. | thick | narrow | key | lock | it | rewritten: "turn", bent/rusty -- a rusty key also sticks
The wolf caught the rabbit because it was {}. | quick | slow | wolf | rabbit | it | ok
The parcel did not fit through the slot because it was too {}. | big | small | parcel | slot | it | rewritten: bulky/tiny -- "bulky" does not describe a slot
The chair broke under the statue because it was {}. | fragile | massive | chair | statue | it | ok
The bag would not close over the coat because it was too {}. | small | bulky | bag | coat | it | ok
The drone could not lift the crate because it was too {}. | weak | heavy | drone | crate | it | ok
The river swept the stone away because it was so {}. | strong | small | river | stone | it | rewritten: "stone sank", dense/calm -- a calm river does not sink it
The blanket did not cover the bed because it was too {}. | short | wide | blanket | bed | it | ok
The owl could not swallow the mouse because it was too {}. | small | big | owl | mouse | it | rewritten: "watched", hungry/moving -- a moving owl also watches
The bucket could not hold the pumpkin because it was too {}. | small | big | bucket | pumpkin | it | rewritten: "water", cracked/boiling -- neither cue fits both nouns
The truck could not enter the tunnel because it was too {}. | high | low | truck | tunnel | it | ok
The ladder did not reach the roof because it was too {}. | short | high | ladder | roof | it | ok
The envelope would not hold the letter because it was too {}. | small | thick | envelope | letter | it | ok
The candle could not light the cave because it was too {}. | small | large | candle | cave | it | rewritten: "lit", burning/dark -- a dark cave does not explain lighting
The goat could not jump over the fence because it was too {}. | small | tall | goat | fence | it | rewritten: "glass cracked in the oven" -- hot glass also cracks
The wind blew the tent away because it was {}. | strong | light | wind | tent | it | rewritten: "tent blew off the hill", windy -- "windy" names the hill
The train could not enter the station because it was too {}. | long | small | train | station | it | rewritten: "stopped at", late/open -- an open station explains nothing
The apple rolled off the plate because it was {}. | round | tilted | apple | plate | it | ok
The mug would not fit under the tap because it was too {}. | tall | low | mug | tap | it | ok
The bird could not fit in the nest because it was too {}. | big | small | bird | nest | it | rewritten: "left", grown/damaged -- "grown" names the bird
The pin would not hold the poster because it was too {}. | short | heavy | pin | poster | it | rewritten: screw/wall soft/hard -- blind reading: a soft wall fits too
The balloon could not lift the basket because it was too {}. | small | big | balloon | basket | it | rewritten: "burst on the fence", inflated/sharp -- "sharp" names the fence
The boot dented the floor because it was {}. | heavy | soft | boot | floor | it | rewritten: "left a mark", muddy/polished -- a muddy floor takes marks
The clock fell from the wall because it was {}. | heavy | weak | clock | wall | it | rewritten: heavy/damp -- a damp wall is a weak reason for the fall
The pot would not fit in the cupboard because it was too {}. | big | narrow | pot | cupboard | it | rewritten: "sit on the burner", big/small -- a small pot also slips
The coin fell through the gap because it was so {}. | thin | wide | coin | gap | it | rewritten: "slipped through the grate", small/wide -- a wide grate is big
The puppy could not climb the step because it was too {}. | little | high | puppy | step | it | rewritten: little/steep -- "steep" does not describe a puppy
The bus could not cross the bridge because it was too {}. | heavy | weak | bus | bridge | it | ok
The sheet would not fit in the printer because it was too {}. | large | narrow | sheet | printer | it | ok
The tree shaded the house because it was {}. | tall | small | tree | house | it | rewritten: leafy/low -- "leafy" names the tree, a low tree shades too
The ship could not enter the harbour because it was too {}. | large | small | ship | harbour | it | rewritten: large/shallow -- "shallow" does not describe a ship
The magnet did not hold the spoon because it was too {}. | weak | heavy | magnet | spoon | it | ok
The jar would not fit in the fridge because it was too {}. | tall | full | jar | fridge | it | ok
The snake could not get into the hole because it was too {}. | big | small | snake | hole | it | rewritten: fat/narrow -- "fat" does not describe a hole
The plane could not land on the field because it was too {}. | big | short | plane | field | it | rewritten: fast/short -- "fast" does not describe a field
The sock would not go over the shoe because it was too {}. | tight | big | sock | shoe | it | ok
The brush could not paint the fence because it was {}. | dry | wet | brush | fence | it | ok
The vase broke on the floor because it was {}. | delicate | hard | vase | floor | it | rewritten: "on the tiles" -- "it" cannot mean the plural "tiles"
"""

_AGREEMENT = """\
The dogs chased the cat until {} stopped. | they | it | dogs | cat
The fox chased the rabbits until {} stopped. | it | they | fox | rabbits
Mary chased John across the yard until {} stopped. | she | he | Mary | John
The boy chased the girl around the park until {} stopped. | he | she | boy | girl
The kids fed the horse and then {} walked off. | they | it | kids | horse
The dog sniffed the ducks and then {} ran off. | it | they | dog | ducks
Anna hugged Tom and then {} sat down. | she | he | Anna | Tom
The king thanked the queen and then {} left the room. | he | she | king | queen
The puppies sat beside the cat while {} slept. | they | it | puppies | cat
The dog lay beside the kittens while {} slept. | it | they | dog | kittens
Sarah sat beside Peter while {} ate lunch. | she | he | Sarah | Peter
The waiter sat beside the actress while {} ate. | he | she | waiter | actress
After the lambs met the dog, {} lay down in the grass. | they | it | lambs | dog
After the cat met the hens, {} went to sleep. | it | they | cat | hens
After Emma met David, {} went home. | she | he | Emma | David
After the monk met the nun, {} went home. | he | she | monk | nun
The girls gave the pony an apple before {} walked away. | they | it | girls | pony
The bird brought the chicks a worm before {} fell asleep. | it | they | bird | chicks
Lucy gave Mark a book before {} went home. | she | he | Lucy | Mark
The grandfather gave the girl a coin before {} left. | he | she | grandfather | girl
The cats saw the dog near the house where {} lived. | they | it | cats | dog
The fox saw the hens near the farm where {} lived. | it | they | fox | hens
Kate met Paul in the town where {} grew up. | she | he | Kate | Paul
Jack met Alice in the city where {} grew up. | he | she | Jack | Alice
When the ducks saw the dog, {} turned around. | they | it | ducks | dog
When the horse saw the cows, {} turned around. | it | they | horse | cows
When Helen saw George, {} smiled. | she | he | Helen | George
When Henry saw Emily, {} smiled. | he | she | Henry | Emily
The girls called the dog before {} left. | they | it | girls | dog
The hen called the chicks before {} moved on. | it | they | hen | chicks
Laura called Robert before {} left. | she | he | Laura | Robert
The man called the woman before {} left. | he | she | man | woman
The horses pulled the wagon along the road, but soon {} stopped. | they | it | horses | wagon
The donkey pulled the carts along the road, but soon {} stopped. | it | they | donkey | carts
The girl pulled the boy along the beach, but soon {} stopped. | she | he | girl | boy
Tom pulled Anna along the path, but soon {} stopped. | he | she | Tom | Anna
The birds looked at the cat for a long time before {} moved. | they | it | birds | cat
The owl looked at the rabbits for a long time before {} moved. | it | they | owl | rabbits
Jane looked at Paul for a long time before {} moved. | she | he | Jane | Paul
The father looked at the daughter for a long time before {} spoke. | he | she | father | daughter
Although the boys liked the puppy, {} left early. | they | it | boys | puppy
Although the dog liked the kids, {} left early. | it | they | dog | kids
Although Alice liked Henry, {} left early. | she | he | Alice | Henry
Although David liked Lucy, {} left early. | he | she | David | Lucy
The goats watched the dog closely as {} turned around. | they | it | goats | dog
The cat watched the birds closely as {} turned around. | it | they | cat | birds
The queen watched the king closely as {} turned around. | she | he | queen | king
The actor watched the waitress closely as {} turned around. | he | she | actor | waitress
The cows stood next to the horse in the rain, so soon {} got wet. | they | it | cows | horse
The dog stood next to the ponies in the rain, so soon {} got wet. | it | they | dog | ponies
Emma stood next to Jack in the rain, so soon {} got wet. | she | he | Emma | Jack
George stood next to Sarah in the rain, so soon {} got wet. | he | she | George | Sarah
"""


def _rows(table: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(part.strip() for part in line.split("|")) for line in table.splitlines())


WINOGRAD_PAIRS = _rows(_WINOGRAD)
AGREEMENT_GROUPS = _rows(_AGREEMENT)
