"""Only the actor that recorded a run's intent speaks for the run: a well-signed claim or
checkpoint by anyone else about that run is VOIDED, and resume never picks it."""

from caramba.actors import ActorSystem
from caramba.actors.experiment import RunSpec
from caramba.actors.identity import Identity, registration_bytes
from caramba.actors.ledger import EntryBody
from caramba.actors.notary import Append, LatestValid, Query, RegisterIdentity, ValidityOf
from caramba.actors.services import run_experiment, start_services


def _forge(notary, mallory: Identity, kind: str, name: str, subject: str, payload: dict, deps: list[str]):
    body = EntryBody(kind=kind, actor=mallory.name, subject=subject, name=name, payload=payload, depends_on=deps)
    return notary.ask(Append(body=body, public_key=mallory.public_key, signature=mallory.sign(body.signed_bytes())))


def test_a_claim_or_checkpoint_by_another_signer_is_not_the_runs(tmp_path):
    with ActorSystem() as system:
        start_services(system, tmp_path)
        status = run_experiment(system, RunSpec(run_id="r1", steps=20, checkpoint_every=10))
        assert status.state == "verified"
        notary = system.lookup("notary")
        intent = notary.ask(Query(subject="r1", kind="intent")).entries[0]
        real_ckpt = notary.ask(LatestValid(subject="r1", name="checkpoint", kind="artifact")).entry

        mallory = Identity.generate("mallory")
        notary.ask(RegisterIdentity(actor=mallory.name, public_key=mallory.public_key,
                                    proof=mallory.sign(registration_bytes(mallory.name, mallory.public_key))))
        art = _forge(notary, mallory, "artifact", "checkpoint", "r1",
                     {**real_ckpt.payload, "step": 999}, [intent.hash])  # points at real, hash-correct bytes
        claim = _forge(notary, mallory, "claim", "final", "r1",
                       {"step": 20, "metrics": {"eval_loss": 1.0, "w_error": 1.0}}, [intent.hash, art.hash])

        for forged in (art, claim):
            v = notary.ask(ValidityOf(entry=forged.hash))
            assert v.verdict == "VOIDED" and "only it speaks for the run" in v.explain()
        assert notary.ask(LatestValid(subject="r1", name="checkpoint", kind="artifact")).entry.hash == real_ckpt.hash
        finals = notary.ask(Query(subject="r1", kind="claim", name="final")).entries
        valid = [c.hash for c in finals if notary.ask(ValidityOf(entry=c.hash)).valid]
        assert valid == [status.claim]

        # commentary by others stays possible: a review is not the run's own evidence
        review = _forge(notary, mallory, "event", "reviewed", "r1", {"ok": True}, [status.claim])
        assert notary.ask(ValidityOf(entry=review.hash)).valid


def test_which_names_speak_for_a_run():
    from caramba.actors.ledger import speaks_for

    author = "experiment:r1#a1b2"
    assert speaks_for("experiment:r1#ffff", "r1", author)  # a restarted incarnation
    assert speaks_for("experiment:r1@lease1234#0001", "r1", author)  # another attempt on a worker
    assert not speaks_for("experiment:r12#0001", "r1", author)  # another run
    assert not speaks_for("mallory#0001", "r1", author)
    assert speaks_for("tuner#2", "r1", "tuner#1") and not speaks_for("tuner2#1", "r1", "tuner#1")


def test_a_run_with_its_own_key_is_spoken_for_by_that_key_alone(tmp_path):
    """With ``keys``, every incarnation of a run signs as ``experiment:<run>`` with the run's key
    (kept in the folder, so a resumed run signs with it too); nobody else can take that name, and
    an 'attempt' name of the run is nobody's."""
    import pytest

    from caramba.actors.ledger import LedgerError

    keys = tmp_path / "keys"
    with ActorSystem() as system:
        start_services(system, tmp_path)
        status = run_experiment(system, RunSpec(run_id="r1", steps=20, checkpoint_every=10), keys=str(keys))
        assert status.state == "verified"
        notary = system.lookup("notary")
        intent = notary.ask(Query(subject="r1", kind="intent")).entries[0]
        assert intent.actor == "experiment:r1" and len(list(keys.iterdir())) == 1

        thief = Identity.generate("experiment:r1")
        with pytest.raises(LedgerError):
            notary.ask(RegisterIdentity(actor=thief.name, public_key=thief.public_key,
                                        proof=thief.sign(registration_bytes(thief.name, thief.public_key))))
        attempt = Identity.generate("experiment:r1@evil")
        notary.ask(RegisterIdentity(actor=attempt.name, public_key=attempt.public_key,
                                    proof=attempt.sign(registration_bytes(attempt.name, attempt.public_key))))
        claim = _forge(notary, attempt, "claim", "final", "r1", {"step": 20, "metrics": {"eval_loss": 1.0}}, [intent.hash])
        v = notary.ask(ValidityOf(entry=claim.hash))
        assert v.verdict == "VOIDED" and "only it speaks for the run" in v.explain()
