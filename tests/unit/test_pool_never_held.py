"""``pool._NeverHeld``: the GPUs granted to Pending replicas that no pod will hold this sync, read after step 2, and
what growth may still be placed on beside them. Pure: no claim, no share."""

from __future__ import annotations

from llmbackend.autoscaling.pool import _NeverHeld


def test_nothing_read_leaves_no_gpus_unheld_and_no_room():
    nothing = _NeverHeld()
    assert nothing.from_level(0) == 0
    assert nothing.room_for(0, free=0) == 0


def test_the_gpus_no_pod_holds_place_the_highest_pod_priority_first():
    # 4 idle GPUs; a class-5 and a class-3 replica of 4 GPUs wait, both refused a cut and growing no further
    never = _NeverHeld.read([], [(3, 5.0, 4, 1, True), (5, 10.0, 4, 1, True)], unheld=4, free=0)
    assert never.at == {3: 4}
    assert never.from_level(3) == 4 and never.from_level(4) == 0


def test_among_equals_the_oldest_pending_replica_is_placed_first():
    # only the younger one was refused for good: placed first, the older leaves it unplaced
    never = _NeverHeld.read([], [(5, 20.0, 4, 1, True), (5, 10.0, 4, 1, False)], unheld=4, free=0)
    assert never.at == {5: 4}
    # dated the other way round, the one refused is the older and is placed
    assert _NeverHeld.read([], [(5, 5.0, 4, 1, True), (5, 10.0, 4, 1, False)], unheld=4, free=0).at == {}


def test_a_replica_not_refused_or_still_growing_is_never_counted_unplaced():
    assert _NeverHeld.read([], [(5, None, 4, 2, False)], unheld=0, free=0).at == {}


def test_the_scheduler_preempts_lower_running_pods_for_a_waiting_replica():
    # no idle GPU, but 4 GPUs of class-0 pods run: the scheduler preempts them for the class-5 replica
    never = _NeverHeld.read([(0, 4)], [(5, None, 4, 1, True)], unheld=0, free=0)
    assert never.at == {} and never.unheld_after == [(5, 0, 4)]
    # pods of its own pod priority are no victims
    assert _NeverHeld.read([(5, 4)], [(5, None, 4, 1, True)], unheld=0, free=0).at == {5: 4}


def test_left_for_counts_lower_pods_beyond_those_preempted_already_and_what_growth_took_since():
    # 6 idle GPUs, two 4-GPU class-5 replicas wait: one placed (2 GPUs left), the other's 4 never held
    never = _NeverHeld.read([], [(5, None, 4, 2, True)], unheld=6, free=0)
    assert never.at == {5: 4} and never.left_for(5, free=0) == 2
    # a grower's room: free GPUs plus what of the 4 granted above its new pods may be placed on, no more
    assert 0 + never.room_for(5, free=0) == 2
    # growth took 2 GPUs since step 2: nothing left
    assert never.left_for(5, free=-2) == 0 and -2 + never.room_for(5, free=-2) == 0
    # 8 GPUs of class-0 pods run beside three waiting class-5 replicas: the scheduler preempts them all for two
    lower = _NeverHeld.read([(0, 8)], [(5, None, 4, 3, True)], unheld=0, free=0)
    assert lower.at == {5: 4} and lower.left_for(5, free=0) == 0
    # 12 GPUs of them beside two: 4 are left to preempt for new class-5 pods, none for class-0 ones
    beside_two = _NeverHeld.read([(0, 12)], [(5, None, 4, 2, True)], unheld=0, free=0)
    assert beside_two.left_for(5, free=0) == 4 and beside_two.left_for(0, free=0) == 0
