"""A grid village: NPC agents that think, walk, gather and talk, on tickwork's host ECS.

The game's own data are host components (`Position`, `Goal`, `Inventory`, `Speech`,
`Resource`); trees and rocks are host entities; `MoveTo`, `Gather` and `Say` are host
actions that villagers yield and the game resolves: `MoveTo` is PENDING until the `walk`
system has moved the villager there one step a tick. `setup(world)` registers the code
(systems and actions), and is what a replay calls again: ``tickwork replay FILE --path
examples/village``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from runtime import (
    PENDING,
    Ask,
    InteractionRequest,
    ScriptedModel,
    Sleep,
    SystemContext,
    Think,
    World,
)

SIZE = 64
PLANS = ["gather", "wander", "gather", "chat", "wander", "ask"]


@dataclass(slots=True)
class Position:
    x: int
    y: int


@dataclass(slots=True)
class Goal:  # a field that changes, not a component that comes and goes (esper's cache)
    x: int = 0
    y: int = 0
    active: bool = False


@dataclass(slots=True)
class Inventory:
    wood: int = 0
    stone: int = 0


@dataclass(slots=True)
class Speech:
    text: str = ""
    until: int = 0  # the tick it fades


@dataclass(slots=True)
class Resource:
    kind: str  # "wood" or "stone"
    amount: int


@dataclass(frozen=True, slots=True)
class MoveTo:
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Gather:
    pass


@dataclass(frozen=True, slots=True)
class Say:
    text: str


def resource_sites(seed: int = 64, count: int = 90) -> list[tuple[str, int, int]]:
    """Where the trees and rocks are (the same for the game and its villagers)."""
    rng = random.Random(seed)
    return [
        ("wood" if i % 3 else "stone", rng.randrange(SIZE), rng.randrange(SIZE))
        for i in range(count)
    ]


SITES = resource_sites()


def villager(turn):
    """Think of a plan, then carry it out with the game's actions; for ever."""
    while True:
        reply = yield Think(f"what should {turn.agent_id} do next?")
        plan = reply.text
        here = turn.get(Position)
        if plan == "gather":
            kind, x, y = min(SITES, key=lambda s: abs(s[1] - here.x) + abs(s[2] - here.y))
            yield MoveTo(x, y)
            got = yield Gather()
            if got:
                yield Say(f"+{got} {kind}")
        elif plan == "wander":
            x = min(SIZE - 1, max(0, here.x + turn.rng.randint(-6, 6)))
            y = min(SIZE - 1, max(0, here.y + turn.rng.randint(-6, 6)))
            yield MoveTo(x, y)
        elif plan == "chat":
            yield Say(turn.rng.choice(["hello!", "nice weather", "any wood?", "zzz"]))
        elif plan == "ask" and turn.rng.random() < 0.02:
            request = InteractionRequest.choice("", "Build a house here?", ["yes", "no"])
            answer = yield Ask(request)
            yield Say("building!" if answer.choice == 0 else "oh well")
        yield Sleep(turn.rng.choice([0.1, 0.2, 0.5]))


def move_to(ctx: SystemContext, agent_id: str, action: MoveTo) -> object:
    entity = ctx.entity(agent_id)
    goal = ctx.get(entity, Goal)
    goal.x, goal.y, goal.active = action.x, action.y, True
    ctx.set(entity, goal)
    return PENDING  # `walk` completes it on arrival


def gather(ctx: SystemContext, agent_id: str, action: Gather) -> object:
    entity = ctx.entity(agent_id)
    pos, bag = ctx.get(entity, Position), ctx.get(entity, Inventory)
    for site, (res, where) in ctx.query(Resource, Position):
        if (where.x, where.y) == (pos.x, pos.y) and res.amount > 0:
            got = min(res.amount, 3)
            res.amount -= got
            ctx.set(site, res)
            if res.kind == "wood":
                bag.wood += got
            else:
                bag.stone += got
            ctx.set(entity, bag)
            return got
    return 0


def say(ctx: SystemContext, agent_id: str, action: Say) -> object:
    entity = ctx.entity(agent_id)
    speech = ctx.get(entity, Speech)
    speech.text, speech.until = action.text, ctx.tick + 30
    ctx.set(entity, speech)
    return None


def walk(ctx: SystemContext) -> None:
    """Every walking villager takes one step towards its goal; arrival completes MoveTo."""
    for entity, (pos, goal) in ctx.query(Position, Goal):
        if not goal.active:
            continue
        pos.x += (goal.x > pos.x) - (goal.x < pos.x)
        pos.y += (goal.y > pos.y) - (goal.y < pos.y)
        ctx.set(entity, pos)
        if (pos.x, pos.y) == (goal.x, goal.y):
            goal.active = False
            ctx.set(entity, goal)
            agent = ctx.agent_id(entity)
            if agent is not None:
                ctx.complete(agent, (pos.x, pos.y))


def setup(world: World) -> None:
    """Register the game's code: what a live run and its replay both need."""
    world.add_action(MoveTo, move_to)
    world.add_action(Gather, gather)
    world.add_action(Say, say)
    world.add_system(walk, after="step_behaviors")


def populate(world: World, npcs: int, seed: int = 1) -> list[str]:
    """Put the trees, rocks and villagers in (journaled inputs: a replay has them)."""
    for kind, x, y in SITES:
        world.add_entity(Resource(kind, 30), Position(x, y))
    rng = random.Random(seed)
    return [
        world.spawn(
            villager,
            name=f"villager-{i}",
            components=[
                Position(rng.randrange(SIZE), rng.randrange(SIZE)),
                Goal(),
                Inventory(),
                Speech(),
            ],
        )
        for i in range(npcs)
    ]


def model() -> ScriptedModel:
    """The villagers' scripted model: each reads the plans in order, round and round."""
    return ScriptedModel(PLANS, cycle=True)


def render(world: World) -> tuple[str, list[str]]:
    """The map as text (``.`` grass, ``T`` tree, ``R`` rock, ``@`` villager) and the
    speech bubbles of this tick."""
    grid = [["."] * SIZE for _ in range(SIZE)]
    for _entity, (res, pos) in world.query(Resource, Position):
        if res.amount > 0:
            grid[pos.y][pos.x] = "T" if res.kind == "wood" else "R"
    bubbles = []
    tick = world.tick_count
    for _entity, (pos, speech) in world.query(Position, Speech):
        grid[pos.y][pos.x] = "@"
        if speech.text and speech.until > tick:
            bubbles.append(speech.text)
    return "\n".join("".join(row) for row in grid), bubbles
