"""`kubectl llmb get`'s rows (pure) and its hand-off of every other subcommand to `llmbackend`."""

from __future__ import annotations

from llmbackend.kubectl_plugin import main, summary, table


def backend(conditions, generation=1, **status):
    return {"metadata": {"name": "chat", "namespace": "team-a", "generation": generation},
            "status": {"conditions": conditions, **status}}


def c(type_, status, reason, message="", generation=1):
    return {"type": type_, "status": status, "reason": reason, "message": message, "observedGeneration": generation}


def test_serving_backend_shows_its_openai_endpoint_and_model():
    row = summary(backend([c("Planned", "True", "Fits"), c("Available", "True", "ReplicasReady"),
                           c("Degraded", "False", "ReplicasReady")], replicas=2, readyReplicas=2,
                          modelName="llama-3-1-8b", endpoint={"service": "chat.team-a.svc", "openaiPort": 9000}))
    assert row == {"NAMESPACE": "team-a", "NAME": "chat", "STATUS": "Ready", "READY": "2/2", "MODEL": "llama-3-1-8b",
                   "OPENAI": "http://chat.team-a.svc:9000/v1", "REASON": "ReplicasReady", "MESSAGE": ""}


def test_failing_backend_says_why_from_the_first_condition_that_is_wrong():
    row = summary(backend([c("Planned", "False", "UnknownPreset", "unknown model preset 'x'; run `llmbackend presets`"),
                           c("Available", "False", "NotPlanned")]))
    assert row["STATUS"] == "Degraded" and row["REASON"] == "UnknownPreset" and "llmbackend presets" in row["MESSAGE"]
    assert row["OPENAI"] == "" and row["READY"] == "0/0"


def test_a_status_for_an_older_generation_is_marked_stale():
    assert summary(backend([c("Available", "True", "ReplicasReady", generation=1)], generation=2))["STATUS"] \
        == "Ready (stale)"


def test_a_download_in_flight_is_progressing_not_degraded():
    row = summary(backend([c("Planned", "False", "WaitingForCheckpoint", "downloading hf://org/m: 10 of 16 GB"),
                           c("Progressing", "True", "DownloadingCheckpoint", "downloading hf://org/m: 10 of 16 GB"),
                           c("Degraded", "False", "NoFailure"), c("Available", "False", "NotPlanned")]))
    assert (row["STATUS"], row["REASON"]) == ("Progressing", "DownloadingCheckpoint")
    assert "10 of 16 GB" in row["MESSAGE"]


def test_table_drops_the_namespace_column_unless_all_namespaces():
    row = summary(backend([]))
    assert table([row], all_namespaces=False).splitlines()[0].split()[0] == "NAME"
    assert table([row], all_namespaces=True).splitlines()[0].split()[0] == "NAMESPACE"
    assert table([], all_namespaces=False) == "No LLMBackends found."


def test_other_subcommands_are_llmbackends(capsys):
    assert main(["crd"]) == 0
    assert "kind: CustomResourceDefinition" in capsys.readouterr().out


def test_help_lists_get_with_the_llmbackend_subcommands(capsys):
    for argv in (["--help"], ["-h"], []):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: kubectl llmb {get,crd,") and "\n  get " in out and "presets" in out, argv


def test_ready_of_an_unplanned_backend_is_what_kubectl_get_llmb_prints():
    """The CRD's READY column is .status.ready: 0/<wanted> before the workload exists (controller/decide.py)."""
    from test_decide import NODES
    from test_decide import backend as cr

    from llmbackend.api.crdgen import crd
    from llmbackend.controller.decide import Observed, decide, finish_status

    obj = cr({"model": {"preset": "no-such-preset", "source": {"pvc": {"claimName": "m"}}}, "replicas": 1})
    status = finish_status(decide(Observed(obj, NODES)))
    column = next(c for c in crd()["spec"]["versions"][0]["additionalPrinterColumns"] if c["name"] == "Ready")
    assert column["jsonPath"] == ".status.ready" and status["ready"] == "0/1"
    assert summary({**obj, "status": status})["READY"] == "0/1"
