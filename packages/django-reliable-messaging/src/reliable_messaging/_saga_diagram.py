"""A saga's definition drawn as a Mermaid state diagram (reliable_messaging.sagas.diagram): made
from the definition alone, so the picture in a host's docs or admin is the saga that runs."""

from reliable_messaging._saga_definitions import Definition


def diagram(saga: Definition) -> str:
    """``stateDiagram-v2`` source: each step with the command it sends and to whom, each reply's
    move (with the failure it means), each forward step's give-up, the final states and what each
    sends; compensations drawn apart (``classDef compensation``)."""
    lines = ["stateDiagram-v2", f"    [*] --> {saga.start}"]
    for state, step in saga.steps.items():
        lines.append(f"    {state} : {step.command} to {step.participant}")
        for reply in step.replies:
            move = step.move(reply)
            assert move is not None  # a reply of the step's own table
            lines.append(f"    {state} --> {move.to} : {reply}" + (f" ({move.reason})" if move.reason else ""))
        if not step.compensation:
            undo = f", {step.undo} sent" if step.undo else ""
            lines.append(f"    {state} --> {step.given_up} : unanswered after {step.attempts} sends{undo}")
    for state, command in saga.ends.items():
        if command:
            lines.append(f"    {state} : sends {command}")
        lines.append(f"    {state} --> [*]")
    compensations = [state for state, step in saga.steps.items() if step.compensation]
    if compensations:
        lines += [
            "    classDef compensation stroke-dasharray: 5 5",
            f"    class {','.join(compensations)} compensation",
        ]
    return "\n".join(lines) + "\n"
