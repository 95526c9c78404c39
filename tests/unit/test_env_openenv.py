"""The OpenEnv adapter against environments written on openenv's own base classes, in-process."""
import pytest

pytest.importorskip("openenv.core.env_server")

from openenv.core.env_server import Action, Environment, Observation, State  # noqa: E402

from llamarl_core.envs.openenv_adapter import (OpenEnvAdapter, action_field, is_openenv,  # noqa: E402
                                               observation_text, wrap_if_openenv)
from llamarl_core.envs.protocol import check_messages, check_step  # noqa: E402


class EchoAction(Action):
    message: str


class CountObservation(Observation):
    echoed: str = ""
    count: int = 0


class CounterEnv(Environment):
    """Echoes each message back with a count; rewards 0.5 per step, done after 3, reward None at step 2."""

    def __init__(self):
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> CountObservation:
        self._state = State(step_count=0)
        return CountObservation(echoed="ready", count=0)

    def step(self, action: EchoAction, timeout_s=None, **kwargs) -> CountObservation:
        self._state.step_count += 1
        n = self._state.step_count
        return CountObservation(echoed=action.message, count=n, reward=None if n == 2 else 0.5, done=n == 3)

    @property
    def state(self) -> State:
        return self._state


class TextObservation(Observation):
    text: str = ""


class GenericEchoEnv(Environment[EchoAction, TextObservation, State]):
    """No annotation on step: the Action class comes from Environment[EchoAction, ...]."""

    def reset(self, seed=None, episode_id=None, **kwargs):
        return TextObservation(text="")

    def step(self, action, timeout_s=None, **kwargs):
        return TextObservation(text=action.message.upper(), reward=True, done=True)

    @property
    def state(self):
        return State()


class TwoFieldAction(Action):
    text: str
    note: str = ""


class NoTextAction(Action):
    move: int


class NoTextEnv(Environment):
    def reset(self, seed=None, episode_id=None, **kwargs):
        return TextObservation(text="go")

    def step(self, action: NoTextAction, timeout_s=None, **kwargs):
        return TextObservation()

    @property
    def state(self):
        return State()


class BoardEnv(GenericEchoEnv):
    def reset(self, seed=None, episode_id=None, **kwargs):
        return TextObservation(text="board: ...")


OPENING = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Count with me."}]


def test_a_counter_env_runs_three_steps_with_reward_and_done_passed_through():
    env = wrap_if_openenv(CounterEnv())
    assert isinstance(env, OpenEnvAdapter) and env.text_field == "message"
    # the reset observation's fields other than done/reward/metadata, as sorted compact JSON
    opening = env.reset({"messages": OPENING})
    assert check_messages(opening, "reset") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": 'Count with me.\n\n{"count":0,"echoed":"ready"}'}]
    assert OPENING[1]["content"] == "Count with me."  # the row's messages are not changed in place
    steps = [check_step(env.step(t)) for t in ("a", "b", "c")]
    zero = {"tool_calls": 0, "tool_errors": 0}
    assert steps == [
        ([{"role": "user", "content": '{"count":1,"echoed":"a"}'}], 0.5, False, zero),
        ([{"role": "user", "content": '{"count":2,"echoed":"b"}'}], None, False, zero),
        ([{"role": "user", "content": '{"count":3,"echoed":"c"}'}], 0.5, True, zero)]


def test_the_action_class_comes_from_the_generic_base_and_a_bool_reward_becomes_a_float():
    env = wrap_if_openenv(GenericEchoEnv())
    # an empty reset text adds nothing; an opening that does not end on a user turn gets none
    assert env.reset({"messages": OPENING}) == OPENING
    assert env.step("hi") == ([{"role": "user", "content": "HI"}], 1.0, True)


def test_an_observation_with_one_str_field_is_shown_as_that_text_and_a_new_user_turn_when_needed():
    assert observation_text(TextObservation(text="x y", reward=1.0, done=True, metadata={"k": 1})) == "x y"
    env = wrap_if_openenv(BoardEnv())
    assert env.reset({"messages": [{"role": "system", "content": "s"}]}) == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "board: ..."}]


def test_the_text_field_is_the_single_str_field_else_one_named_message_text_or_action():
    assert action_field(EchoAction) == "message"
    assert action_field(TwoFieldAction) == "text"  # two str fields: the one named `text`


def test_an_action_with_no_text_field_is_refused_naming_the_class_and_its_fields():
    with pytest.raises(ValueError, match=r"NoTextAction has no field.*\['move'\]"):
        action_field(NoTextAction)
    with pytest.raises(ValueError, match="NoTextAction"):
        wrap_if_openenv(NoTextEnv())  # refused when wrapped, before any episode runs


def test_our_own_environments_and_other_objects_pass_through_unchanged():
    class Ours:
        def reset(self, example):
            return example["messages"]

        def step(self, text):
            return [], 1.0, True

    ours = Ours()
    assert wrap_if_openenv(ours) is ours and not is_openenv(ours)
    assert is_openenv(CounterEnv())
