"""The local actor system: typed handlers, ask/tell, deterministic delivery, supervision."""

import pytest

from caramba.actors import (
    NEVER,
    Actor,
    ActorDied,
    ActorExists,
    ActorFailed,
    ActorNotFound,
    ActorSystem,
    Deadlock,
    Message,
    MessageError,
    Placement,
    PlacementError,
    Supervision,
    UnknownMessage,
    handler,
)
from caramba.errors import CarambaError, ConfigError


class Add(Message):
    amount: int


class Get(Message):
    pass


class Boom(Message):
    kind: str = "bug"


class Forward(Message):
    to: str
    amount: int


class AskBack(Message):
    to: str


class Total(Message):
    value: int


class Log(Message):
    text: str


class Counter(Actor):
    def __init__(self, start: int = 0, log: str | None = None):
        self.n = start
        self.log = log

    def started(self):
        self.restarts_seen = []

    def restarted(self, cause):
        self.restarts_seen.append(cause)

    @handler
    def add(self, msg: Add) -> Total:
        self.n += msg.amount
        if self.log:
            self.context.lookup(self.log).tell(Log(text=f"{self.context.name}+{msg.amount}"))
        return Total(value=self.n)

    @handler
    def get(self, msg: Get) -> Total:
        return Total(value=self.n)

    @handler
    def boom(self, msg: Boom) -> None:
        if msg.kind == "bug":
            raise ZeroDivisionError("division by zero in a handler")
        raise ConfigError("the request was wrong, the actor is fine")

    @handler
    def forward(self, msg: Forward) -> int:
        # a nested ask: another actor is processed while this one waits
        return self.context.lookup(msg.to).ask(Add(amount=msg.amount)).value + self.n

    @handler
    def ask_back(self, msg: AskBack) -> int:
        return self.context.lookup(msg.to).ask(AskBack(to=self.context.name))


class Recorder(Actor):
    def __init__(self):
        self.lines = []

    @handler
    def log(self, msg: Log) -> None:
        self.lines.append(msg.text)

    @handler
    def get(self, msg: Get) -> list:
        return self.lines


@pytest.fixture
def system():
    with ActorSystem() as s:
        yield s


def test_ask_and_tell(system):
    c = system.spawn(Counter, "c", kwargs={"start": 5})
    assert c.ask(Add(amount=2)) == Total(value=7)
    c.tell(Add(amount=3))
    assert system.pending == 1
    assert c.ask(Get()).value == 10  # the told message was delivered first
    assert system.lookup("c").ask(Get()).value == 10


def test_delivery_is_deterministic():
    def run():
        with ActorSystem() as s:
            s.spawn(Recorder, "log")
            a = s.spawn(Counter, "a", kwargs={"log": "log"})
            b = s.spawn(Counter, "b", kwargs={"log": "log"})
            for i in range(5):
                a.tell(Add(amount=i))
                b.tell(Add(amount=10 * i))
            assert a.ask(Forward(to="b", amount=100)) == 10 + 100 + 100
            s.run_until_idle()
            return s.lookup("log").ask(Get())

    first = run()
    assert first == run()
    assert first[:4] == ["a+0", "b+0", "a+1", "b+10"]


def test_caramba_errors_answer_without_a_crash(system):
    c = system.spawn(Counter, "c", kwargs={"start": 1})
    with pytest.raises(ConfigError, match="the request was wrong") as info:
        c.ask(Boom(kind="user"))
    assert isinstance(info.value, CarambaError)
    assert c.ask(Get()).value == 1  # same instance, state kept


def test_crash_restarts_then_dies_with_a_clear_error(system):
    c = system.spawn(Counter, "calc", kwargs={"start": 1}, supervision=Supervision(max_restarts=2))
    c.ask(Add(amount=4))
    with pytest.raises(ActorFailed, match=r"actor 'calc' crashed handling Boom: ZeroDivisionError") as info:
        c.ask(Boom())
    assert info.value.actor == "calc"
    assert c.ask(Get()).value == 1  # a fresh instance from the same arguments
    with pytest.raises(ActorFailed):
        c.ask(Boom())
    with pytest.raises(ActorFailed):
        c.ask(Boom())  # third crash: over the limit, the actor dies
    with pytest.raises(ActorDied, match=r"actor 'calc' is dead: .*ZeroDivisionError.*after 2 restarts"):
        c.ask(Get())
    assert "calc" not in system.names()


def test_never_restart_and_kill(system):
    c = system.spawn(Counter, "once", supervision=NEVER)
    with pytest.raises(ActorFailed):
        c.ask(Boom())
    with pytest.raises(ActorDied, match="'once' is dead"):
        c.ask(Get())
    k = system.spawn(Counter, "k")
    k.tell(Add(amount=1))
    system.kill("k")
    with pytest.raises(ActorDied, match="actor 'k' is dead: killed"):
        k.ask(Get())
    k.tell(Add(amount=1))
    assert "Add to k" in system.dead_letters[-1]
    system.spawn(Counter, "k")  # the name can be reused
    assert k.ask(Get()).value == 0


def test_restart_hook_sees_the_cause(system):
    c = system.spawn(Counter, "r")
    with pytest.raises(ActorFailed):
        c.ask(Boom())
    # the restarted instance got the cause
    cell = system._cells["r"]
    assert "ZeroDivisionError" in cell.instance.restarts_seen[0]


def test_names_and_messages_are_checked(system):
    system.spawn(Counter, "counter")
    with pytest.raises(ActorExists):
        system.spawn(Counter, "counter")
    with pytest.raises(ActorNotFound, match="did you mean 'counter'"):
        system.lookup("countr")
    with pytest.raises(UnknownMessage, match=r"has no handler for Log; it accepts Add, AskBack, Boom, Forward, Get"):
        system.lookup("counter").ask(Log(text="x"))
    with pytest.raises(ValueError, match="Extra inputs"):
        Add(amount=1, extra=2)
    with pytest.raises(MessageError, match="must be JSON data"):
        system.spawn(Counter, "bad", kwargs={"start": object()})


def test_deadlock_is_detected(system):
    a = system.spawn(Counter, "a")
    system.spawn(Counter, "b")
    with pytest.raises(Deadlock, match="a -> b -> a"):
        a.ask(AskBack(to="b"))


def test_placement_is_checked_never_redirected(system):
    system.spawn(Counter, "on-cpu", placement=Placement(backend="cpu"))
    with pytest.raises(PlacementError, match="needs backend:nope, which no node offers"):
        system.spawn(Counter, "elsewhere", placement=Placement(backend="nope"))


def test_unknown_transport():
    with pytest.raises(ConfigError, match="unknown actor transport 'rey'.*'ray'"):
        ActorSystem("rey")


def test_handlers_must_be_typed():
    with pytest.raises(TypeError, match="annotate the message parameter"):

        class Bad(Actor):
            @handler
            def h(self, msg: int) -> None: ...


class Go(Message):
    pass


class Middle(Actor):
    def __init__(self):
        self.poked = False

    @handler
    def get(self, msg: Get) -> Total:
        if not self.poked:  # a message that will need this (busy) actor arrives while it waits
            self.poked = True
            self.context.lookup("client1").tell(Go())
        return self.context.lookup("leaf").ask(Get())


class Client(Actor):
    def __init__(self):
        self.got = None

    @handler
    def go(self, msg: Go) -> None:
        self.got = self.context.lookup("middle").ask(Get()).value

    @handler
    def get(self, msg: Get) -> int | None:
        return self.got


def test_waiting_actors_never_have_others_run_on_top_of_them(system):
    system.spawn(Counter, "leaf", kwargs={"start": 7})
    system.spawn(Middle, "middle")
    clients = [system.spawn(Client, f"client{i}") for i in range(2)]
    clients[0].tell(Go())
    system.run_until_idle()
    assert system.dead_letters == []
    assert [c.ask(Get()) for c in clients] == [7, 7]
