package durable

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two checkpointed nodes with one id, in two sub-graphs, would share one
// stored result, the second taking the first's without calling its
// worker: the second to run fails instead, naming both nodes' paths. One
// worker runs; the attempt fails. So do they when the SubGraph nodes have
// no ids: their paths name them "#" and their index. Before, both paths
// were ["" "fetch"], equal, and the second node took the first's stored
// result without its worker.
func TestNodesSharingAnIDInTwoSubGraphsFail(t *testing.T) {
	for _, tc := range []struct {
		name, left, right, leftPath, rightPath string
	}{
		{"named", "left", "right", `["left" "fetch"]`, `["right" "fetch"]`},
		{"anonymous", "", "", `["#0" "fetch"]`, `["#1" "fetch"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			sub := func(cp *Checkpoint) asynctool.SubGraph[int, int] {
				return asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
					f := intNode(cp, "fetch", &runs, nil)
					return asynctool.Built[int]{Starts: []asynctool.Wrapper{f}, Output: func() (int, error) {
						r := f.Result()
						return r.Value, r.Err
					}}, nil
				}}
			}
			evs := runJob(t, 1, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
				l := asynctool.NewWrapper(tc.left, sub(cp), 0)
				r := asynctool.NewWrapper(tc.right, sub(cp), 0)
				asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
					return 0, nil
				}), 0).Depend(l, true).Depend(r, true)
				return []asynctool.Wrapper{l, r}, nil
			})
			require.Len(t, evs, 1)
			assert.Equal(t, rivertype.JobStateDiscarded, evs[0].Job.State)
			require.NotEmpty(t, evs[0].Job.Errors)
			msg := evs[0].Job.Errors[0].Error
			assert.Contains(t, msg, `both have id "fetch"`)
			assert.Contains(t, msg, tc.leftPath)
			assert.Contains(t, msg, tc.rightPath)
			assert.Equal(t, int32(1), runs.Load())
		})
	}
}

// A SubGraph retried in the same attempt builds its checkpointed node
// again, at the same path: the node takes the result it produced in the
// first try, without calling its worker again.
func TestASubGraphRetriedReplaysItsNode(t *testing.T) {
	var runs, tries atomic.Int32
	evs := runJob(t, 1, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		g := asynctool.NewWrapper("g", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			f := intNode(cp, "g/fetch", &runs, nil)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{f}, Output: func() (int, error) {
				if tries.Add(1) == 1 {
					return 0, errors.New("the first try fails after fetch")
				}
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0).Retry(asynctool.RetryPolicy{Attempts: 2})
		return []asynctool.Wrapper{g}, nil
	})
	require.Len(t, evs, 1)
	assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind)
	assert.Equal(t, int32(2), tries.Load())
	assert.Equal(t, int32(1), runs.Load(), "the retry replays fetch")
}

// A suspended node that is not checkpointed, in the outer graph, is not
// replayed with the stored result of a checkpointed node that a
// SubGraph's Build made with the same id (ids are unique within one graph
// only): the job parks again until a person decides. Before, the second
// attempt ended the suspended "approve" with the sub-graph's stored 7,
// without its worker succeeding, and the job completed.
func TestSuspendedNodeIsNotReplayedWithASubGraphNodesResult(t *testing.T) {
	var subRuns, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	got.Store(-1)
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		sub := subGraphOfNode(cp, "approve", &subRuns)
		approve := asynctool.NewWrapper("approve", approvalWorker(&s, &approved), 0).Depend(sub, true).OnFailure(asynctool.PolicySuspend)
		sinkReading("approve", &got).Depend(approve, true)
		return []asynctool.Wrapper{sub}, nil
	})
	_, err := Resume(context.Background(), client, id, nil)
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again: nobody approved")
	assert.Equal(t, int64(-1), got.Load(), "the sink did not run")
	assert.Equal(t, int32(2), s.Load(), "approve's worker ran on each attempt")
	assert.Equal(t, int32(1), subRuns.Load(), "the sub-graph's node was replayed")
}

// A checkpointed node of the outer graph that a custom join suspends is
// ended with its stored result when the run stalls, without its Action:
// the check that no other checkpointed node, in a sub-graph, has its id
// must be made there too, or it takes that node's result. Before, the
// attempt parked without naming the clash, and the next one ended "c"
// with the sub-graph's 7, which the sink read.
func TestNodeACustomJoinSuspendedSharingASubGraphNodesIDFails(t *testing.T) {
	var c, subRuns atomic.Int32
	var got atomic.Int64
	got.Store(-1)
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		sub := subGraphOfNode(cp, "c", &subRuns)
		up := asynctool.NewWrapper("up", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("the partner's API is down")
		}), 0).Depend(sub, true)
		nc := intNode(cp, "c", &c, nil).Depend(up, true).Join(asynctool.CustomJoin(func(ups []asynctool.Upstream) asynctool.Decision {
			if !ups[0].OK {
				return asynctool.DecideSuspend
			}
			return asynctool.DecideRun
		}))
		sinkReading("c", &got).Depend(nc, true)
		return []asynctool.Wrapper{sub}, nil
	})
	job, err := client.JobGet(context.Background(), id)
	require.NoError(t, err)
	require.NotEmpty(t, job.Errors)
	assert.Contains(t, job.Errors[len(job.Errors)-1].Error, `["sub" "c"] and ["c"] both have id "c"`)

	_, err = Resume(context.Background(), client, id, nil)
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	assert.Equal(t, int64(-1), got.Load(), "the sink did not run")
	assert.Zero(t, c.Load())
	assert.Equal(t, int32(1), subRuns.Load())
}

// Replayed counts nodes, not replays: on attempt 2 a SubGraph's first try
// fails after its checkpointed node replayed, and its retry builds and
// replays the node again. Before, Replayed said 2 of this one node.
func TestReplayedCountsANodeOnce(t *testing.T) {
	var runs, tries, sinks atomic.Int32
	var replayed atomic.Int64
	evs := runJob(t, 2, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		g := asynctool.NewWrapper("g", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			f := intNode(cp, "g/fetch", &runs, nil)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{f}, Output: func() (int, error) {
				if tries.Add(1) == 2 {
					return 0, errors.New("attempt 2's first try fails after fetch")
				}
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0).Retry(asynctool.RetryPolicy{Attempts: 2})
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			replayed.Store(int64(cp.Replayed()))
			if sinks.Add(1) == 1 {
				return 0, errors.New("attempt 1 fails")
			}
			return 0, nil
		}), 0).Depend(g, true)
		return []asynctool.Wrapper{g}, nil
	})
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, int32(3), tries.Load(), "attempt 2 tried the SubGraph twice")
	assert.Equal(t, int32(1), runs.Load(), "fetch ran on attempt 1 only")
	assert.Equal(t, int64(1), replayed.Load())
}

// A suspended node that is not checkpointed is not ended with the stored
// result of a checkpointed node with its id that the BuildFunc compiled
// into a Plan run by a SubPlan node: made before the run, like the outer
// graph's, that node is still no node of the outer run. Attempt 2 fails
// at gate, so the SubPlan node does not run, and approve stalls. Before,
// approve took the plan's stored 7 and the sink read it; the attempt
// then failed at the SubPlan node, instead of parking for a person.
func TestSuspendedNodeIsNotReplayedWithAPlanNodesResult(t *testing.T) {
	var planRuns, s, gates atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	got.Store(-1)
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		n := Node(cp, "approve", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			planRuns.Add(1)
			return 7, nil
		}), 0)
		plan, err := asynctool.Compile(n)
		if err != nil {
			return nil, err
		}
		gate := asynctool.NewWrapper("gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if gates.Add(1) > 1 {
				return 0, errors.New("gate is down")
			}
			return 0, nil
		}), 0)
		asynctool.NewWrapper("sp", asynctool.SubPlan[int, int]{Plan: plan, Output: n.ValueIn}, 0).Depend(gate, true)
		approve := asynctool.NewWrapper("approve", approvalWorker(&s, &approved), 0).OnFailure(asynctool.PolicySuspend)
		sinkReading("approve", &got).Depend(approve, true)
		return []asynctool.Wrapper{gate, approve}, nil
	})
	_, err := Resume(context.Background(), client, id, nil)
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again: nobody approved")
	assert.Contains(t, lastError(t, ev), `"approve" (needs approval)`)
	assert.Equal(t, int64(-1), got.Load(), "the sink did not run")
	assert.Equal(t, int32(2), s.Load(), "approve's worker ran on each attempt")
	assert.Equal(t, int32(1), planRuns.Load())
}

// subGraphOfNode is a node "sub" whose SubGraph is one checkpointed node
// with id, which counts its runs in runs and returns 7.
func subGraphOfNode(cp *Checkpoint, id string, runs *atomic.Int32) *asynctool.WorkerWrapper[int, int] {
	return asynctool.NewWrapper("sub", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
		n := Node(cp, id, asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			runs.Add(1)
			return 7, nil
		}), 0)
		return asynctool.Built[int]{Starts: []asynctool.Wrapper{n}, Output: func() (int, error) {
			r := n.Result()
			return r.Value, r.Err
		}}, nil
	}}, 0)
}

// sinkReading is a node "sink" that reads the int result of the node with
// id up and stores its value in got.
func sinkReading(up string, got *atomic.Int64) *asynctool.WorkerWrapper[int, int] {
	return asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
		r, err := asynctool.ResultOf[int](all, up)
		got.Store(int64(r.Value))
		return r.Value, err
	}), 0)
}

// A checkpointed node that a custom join suspends is ended with its
// stored result when the run stalls, even when the BuildFunc made another
// checkpointed node with its id, after it or before it, that is no node
// of the run (an alternative it did not pick, or one it compiled into a
// Plan): the replay is that of the node in the run, and Replayed counts
// it. Attempt 1 runs x and fails at the sink; on attempt 2 up fails, the
// join suspends x, and x takes its stored 5. Before, the attempt asked
// only the node made last, which declined when it was the other one, and
// the job parked on x with nobody to decide it.
func TestNodeACustomJoinSuspendedReplaysBesideANodeOutsideTheRun(t *testing.T) {
	for _, c := range []struct {
		name       string
		otherFirst bool
	}{{"other made after", false}, {"other made before", true}} {
		otherFirst := c.otherFirst
		t.Run(c.name, func(t *testing.T) {
			var ups, xRuns, sinks atomic.Int32
			var got, replayed atomic.Int64
			got.Store(-1)
			evs := runJob(t, 2, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
				other := func() {
					_ = Node(cp, "x", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
						return 9, nil
					}), 0)
				}
				if otherFirst {
					other()
				}
				up := asynctool.NewWrapper("up", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
					if ups.Add(1) > 1 {
						return 0, errors.New("the partner's API is down")
					}
					return 0, nil
				}), 0)
				x := Node(cp, "x", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
					xRuns.Add(1)
					return 5, nil
				}), 0).Depend(up, true).Join(asynctool.CustomJoin(func(ups []asynctool.Upstream) asynctool.Decision {
					if !ups[0].OK {
						return asynctool.DecideSuspend
					}
					return asynctool.DecideRun
				}))
				if !otherFirst {
					other()
				}
				asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
					replayed.Store(int64(cp.Replayed()))
					if sinks.Add(1) == 1 {
						return 0, errors.New("attempt 1 fails")
					}
					r, err := asynctool.ResultOf[int](all, "x")
					got.Store(int64(r.Value))
					return r.Value, err
				}), 0).Depend(x, true)
				return []asynctool.Wrapper{up}, nil
			})
			require.Len(t, evs, 2)
			if !assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind, "x replayed on attempt 2") {
				t.Logf("last error: %s", lastError(t, evs[1]))
			}
			assert.Equal(t, int64(5), got.Load(), "the sink read x's stored result")
			assert.Equal(t, int32(1), xRuns.Load(), "x ran on attempt 1 only")
			assert.Equal(t, int64(1), replayed.Load(), "attempt 2 replayed x")
		})
	}
}
