package durable

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// The stress runs random graphs of checkpointed nodes as River jobs on
// SQLite, with nodes that fail for a few calls, or always, nodes that
// snooze the job once, nodes that suspend until a person approves them
// or gives their value with Resume, with and without SaveEach, and
// random crashes of the machine that runs an attempt (a stop, a death),
// and checks the package's promises against a model of the plan:
//
//   - a checkpointed node whose result the job's row holds (an earlier
//     attempt's, a save of SaveEach's, a value Resume gave) is never
//     called again; the row holds the result of every node that
//     succeeded in an attempt that failed, snoozed or parked the job;
//     with SaveEach, a dead machine's row holds the result of every
//     upstream of a node that had started; a node's worker succeeds
//     once, and again only after an attempt that crashed;
//   - every value a node reads, replayed or not, is the one the plan
//     computes (each node's value depends on its index and its
//     upstreams' values, so a replay of the wrong node shows), with the
//     values Resume gave;
//   - each attempt's error (text and JSON) names the nodes that failed,
//     snoozed and suspended in it, and none that succeeded; it snoozes
//     the job only when no node suspended; a failure the graph
//     tolerates (an optional upstream of the sink) fails no attempt; a
//     job ends completed, or discarded when one of its nodes never
//     succeeds;
//   - Resume refuses a running job (ErrJobRunning), a finished one
//     (ErrNotParked) and an id the graph does not checkpoint.
//
// ASYNCTOOL_DURABLE_STRESS_JOBS sets how many jobs it runs (10 by
// default), ASYNCTOOL_DURABLE_STRESS_SEED the seed of the first (random
// by default; each job's subtest is named by its seed).

// stressKind is what a checkpointed node of a stress plan does.
type stressKind int

const (
	stressOK        stressKind = iota // succeeds
	stressTransient                   // fails its first calls, then succeeds
	stressSuspend                     // suspends (PolicySuspend) until approved
	stressBroken                      // always fails: the job is discarded
	stressSnooze                      // snoozes the job (river.JobSnooze) on its first call
)

// stressNode is a checkpointed node of a stress plan.
type stressNode struct {
	id    string
	deps  []int // indexes of its upstreams, all must
	kind  stressKind
	fails int // stressTransient: how many of its calls fail
}

// stressCrashKind is how the machine running an attempt crashes.
type stressCrashKind int

const (
	// crashStop stops the client with StopAndCancel, as a machine shut
	// down: the attempt's ctx is cancelled, and River makes the job
	// available again with the attempt's checkpoint.
	crashStop stressCrashKind = iota + 1
	// crashDeath kills the machine: its process writes nothing more, and
	// the job's row stays as the process left it (the checkpoint of the
	// attempt before, and what SaveEach saved), until River's rescuer
	// makes the job available again (TestDeadClientsJobIsRescuedOnSQLite
	// covers the rescue; here the test leaves the row as it does).
	crashDeath
)

// stressPlan is a random job: its graph, how it runs and how it crashes.
type stressPlan struct {
	seed     int64
	nodes    []stressNode
	saveEach bool
	// crashes are the crashes, by the number of the worker call (counting
	// every call of a checkpointed node's worker in the job, from 1) that
	// the machine dies in.
	crashes map[int]stressCrashKind
	// runningAt is the number of the worker call that checks that Resume
	// refuses the job, running; 0 for none.
	runningAt int
	broken    bool
	// optional adds the checkpointed node "opt", which always fails, as
	// an optional upstream of end: a failure the graph tolerates.
	optional bool
}

const stressMaxAttempts = 12

func newStressPlan(seed int64) stressPlan {
	r := rand.New(rand.NewSource(seed))
	p := stressPlan{seed: seed, saveEach: r.Intn(2) == 0, crashes: map[int]stressCrashKind{}}
	n := 3 + r.Intn(5)
	transients := 0
	for i := range n {
		nd := stressNode{id: "n" + strconv.Itoa(i)}
		for j := range i {
			if r.Intn(5) < 2 {
				nd.deps = append(nd.deps, j)
			}
		}
		switch k := r.Intn(10); {
		case k >= 6 && k <= 7 && transients < 3:
			nd.kind, nd.fails = stressTransient, 1+r.Intn(2)
			transients++
		case k == 8:
			nd.kind = stressSuspend
		case k == 9 && r.Intn(2) == 0:
			nd.kind = stressSnooze
		}
		p.nodes = append(p.nodes, nd)
	}
	if r.Intn(10) == 0 {
		p.nodes[r.Intn(n)].kind = stressBroken
		p.broken = true
	}
	for range r.Intn(3) {
		kind := crashStop
		if r.Intn(2) == 0 {
			kind = crashDeath
		}
		p.crashes[1+r.Intn(n+4)] = kind
	}
	if r.Intn(3) == 0 {
		p.runningAt = 1 + r.Intn(n+2)
	}
	p.optional = r.Intn(3) == 0
	return p
}

// stressValue is the value of node i of a plan, given its upstreams'
// values, in the order of its deps.
func stressValue(i int, ups []int) int {
	v := (i + 1) * 7919
	for _, u := range ups {
		v = (v + u*(i+3)) % 1000003
	}
	return v
}

// stressEpoch is what one attempt's nodes did, as the test's workers saw.
type stressEpoch struct {
	key                          string // the attempt's, see attemptKey
	succeeded, failed, suspended map[string]bool
	snoozed                      map[string]bool
	started                      map[int]bool // nodes whose worker was called
	endRan, crashed              bool
}

// stressProc is one machine: a River client with its own connection to
// the job's database, and its own Worker.
type stressProc struct {
	client *river.Client[*sql.Tx]
	db     *sql.DB
	events <-chan *river.Event
	dead   bool         // under the job's mu
	epoch  *stressEpoch // the attempt it runs; under the job's mu
	// saveMu orders its saves and its death: no save writes after it.
	saveMu sync.Mutex
}

// stressCrash is a crash a worker reports to the test.
type stressCrash struct {
	kind     stressCrashKind
	proc     *stressProc
	metadata string // crashDeath: the job's metadata when it died
	attempt  int    // crashDeath: the attempt it died in
	err      error
}

var errStressDead = errors.New("the machine is dead")

// stressJob is the state of one job of the stress, shared by the test
// and every machine's workers.
type stressJob struct {
	plan    stressPlan
	path    string
	obs     *sql.DB // the test's own connection
	crashes chan stressCrash

	mu        sync.Mutex
	calls     int                     // worker calls so far, crashes included
	runs      map[string]int          // calls of each node's worker, crashes left out
	successes map[string]int          // successful calls of each node's worker
	stored    map[string]bool         // results the job's row has held
	decided   map[string]int          // values Resume gave
	approved  map[string]bool         // suspending nodes that now succeed
	last      *stressEpoch            // the last attempt that started
	epochs    []*stressEpoch          // every attempt that started
	ended     map[string]*stressEpoch // attempts that ended without a crash, by attemptKey
	deaths    int
	// checkedStored counts the attempts checkStored checked.
	checkedStored int
	problems      []string
	trace         []string
}

// traceLocked records what happened, for the report of a failure.
func (js *stressJob) traceLocked(format string, args ...any) {
	js.trace = append(js.trace, fmt.Sprintf(format, args...))
}

func (js *stressJob) traceEvent(format string, args ...any) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.traceLocked(format, args...)
}

func (js *stressJob) problemLocked(format string, args ...any) {
	js.problems = append(js.problems, fmt.Sprintf(format, args...))
}

func (js *stressJob) problem(format string, args ...any) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.problemLocked(format, args...)
}

// expectLocked is node i's value as the plan computes it, with the
// values Resume gave.
func (js *stressJob) expectLocked(i int) int {
	nd := js.plan.nodes[i]
	if v, ok := js.decided[nd.id]; ok {
		return v
	}
	ups := make([]int, len(nd.deps))
	for k, d := range nd.deps {
		ups[k] = js.expectLocked(d)
	}
	return stressValue(i, ups)
}

// markStored records the checkpointed results that metadata, a job's,
// holds.
func (js *stressJob) markStored(metadata []byte) {
	_, cp, _, err := parked(metadata)
	js.mu.Lock()
	defer js.mu.Unlock()
	if err != nil {
		js.problemLocked("reading the job's metadata: %v", err)
		return
	}
	for id := range cp {
		if id != parkKey {
			js.stored[id] = true
		}
	}
}

// start starts a machine on the job's database.
func (js *stressJob) start(t *testing.T) *stressProc {
	t.Helper()
	p := &stressProc{db: openStressDB(t, js.path)}
	w := mustWorker(t, newAsync(t), 10*time.Second, js.build(p))
	if js.plan.saveEach {
		inner := sqliteSave(p.db, nil, nil)
		w.SaveEach(func(ctx context.Context, job *river.Job[sumArgs], cursor map[string]json.RawMessage) error {
			p.saveMu.Lock()
			defer p.saveMu.Unlock()
			js.mu.Lock()
			dead := p.dead
			js.mu.Unlock()
			if dead {
				return errStressDead
			}
			return inner(ctx, job, cursor)
		})
	}
	workers := river.NewWorkers()
	river.AddWorker[sumArgs](workers, stressWorker{Worker: w, js: js, p: p})
	p.client = testClient(t, riversqlite.New(p.db), &river.Config{RetryPolicy: retryNow{}, Workers: workers})
	events, cancel := p.client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed)
	t.Cleanup(cancel)
	p.events = events
	startClient(t, p.client)
	return p
}

// openStressDB opens the SQLite file at path, as another process would.
func openStressDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// build is the BuildFunc of machine p: the plan's nodes, and end, which
// depends on all of them and checks their values.
func (js *stressJob) build(p *stressProc) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		js.mu.Lock()
		if p.dead {
			js.mu.Unlock()
			return nil, errStressDead
		}
		ep := &stressEpoch{key: attemptKey(job.JobRow), snoozed: map[string]bool{},
			succeeded: map[string]bool{}, failed: map[string]bool{}, suspended: map[string]bool{}, started: map[int]bool{}}
		p.epoch, js.last = ep, ep
		js.traceLocked("attempt %s starts on machine %p", ep.key, p)
		js.epochs = append(js.epochs, ep)
		js.mu.Unlock()
		nodes := make([]*asynctool.WorkerWrapper[int, int], len(js.plan.nodes))
		var starts []asynctool.Wrapper
		for i, nd := range js.plan.nodes {
			nodes[i] = Node(cp, nd.id, asynctool.WorkerFunc[int, int](func(ctx context.Context, param int, all asynctool.Wrappers) (int, error) {
				return js.work(ctx, p, ep, job.ID, param, all)
			}), i)
			for _, d := range nd.deps {
				nodes[i].Depend(nodes[d], true)
			}
			if nd.kind == stressSuspend {
				nodes[i].OnFailure(asynctool.PolicySuspend)
			}
			if len(nd.deps) == 0 {
				starts = append(starts, nodes[i])
			}
		}
		end := asynctool.NewWrapper("end", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			js.mu.Lock()
			defer js.mu.Unlock()
			if p.dead {
				return 0, errStressDead
			}
			for i, nd := range js.plan.nodes {
				r, err := asynctool.ResultOf[int](all, nd.id)
				if want := js.expectLocked(i); err != nil || r.Value != want {
					js.problemLocked("end read %s = %d (%v), want %d", nd.id, r.Value, err, want)
				}
			}
			ep.endRan = true
			return 0, nil
		}), 0)
		for _, n := range nodes {
			end.Depend(n, true)
		}
		if js.plan.optional {
			opt := Node(cp, "opt", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				js.mu.Lock()
				defer js.mu.Unlock()
				if p.dead {
					return 0, errStressDead
				}
				if js.stored["opt"] {
					js.problemLocked("opt's worker was called though the job's row holds its result")
				}
				js.traceLocked("attempt %s: opt fails", ep.key)
				return 0, errors.New("opt is down")
			}), 0)
			end.Depend(opt, false)
			starts = append(starts, opt)
		}
		return starts, nil
	}
}

// work is the worker of node i (param) of an attempt, ep, on machine p.
func (js *stressJob) work(ctx context.Context, p *stressProc, ep *stressEpoch, jobID int64, i int, all asynctool.Wrappers) (int, error) {
	nd := js.plan.nodes[i]
	js.mu.Lock()
	if p.dead {
		js.mu.Unlock()
		return 0, errStressDead
	}
	js.calls++
	call := js.calls
	ep.started[i] = true
	crash := js.plan.crashes[call]
	if ep.crashed {
		crash = 0 // one crash per attempt: the machine is down already
	}
	switch crash {
	case crashStop:
		ep.crashed = true
		js.traceLocked("attempt %s: call %d: %s: the machine stops", ep.key, call, nd.id)
		js.mu.Unlock()
		js.crashes <- stressCrash{kind: crashStop, proc: p}
		<-ctx.Done() // River's StopAndCancel
		return 0, ctx.Err()
	case crashDeath:
		ep.crashed = true
		js.mu.Unlock()
		// No save may write once the machine is dead: the row is what it
		// holds now.
		p.saveMu.Lock()
		js.mu.Lock()
		p.dead = true
		js.traceLocked("attempt %s: call %d: %s: the machine dies", ep.key, call, nd.id)
		js.mu.Unlock()
		c := stressCrash{kind: crashDeath, proc: p}
		c.err = js.obs.QueryRow(`SELECT json(metadata), attempt FROM river_job WHERE id = ?`, jobID).Scan(&c.metadata, &c.attempt)
		p.saveMu.Unlock()
		if c.err == nil && js.plan.saveEach {
			js.checkSaved(ep, c.metadata)
		}
		js.crashes <- c
		return 0, errStressDead
	}
	if js.stored[nd.id] {
		js.problemLocked("%s's worker was called though the job's row holds its result", nd.id)
	}
	if _, ok := js.decided[nd.id]; ok {
		js.problemLocked("%s's worker was called though Resume gave its value", nd.id)
	}
	js.runs[nd.id]++
	ups := make([]int, len(nd.deps))
	for k, d := range nd.deps {
		r, err := asynctool.ResultOf[int](all, js.plan.nodes[d].id)
		if want := js.expectLocked(d); err != nil || r.Value != want {
			js.problemLocked("%s read %s = %d (%v), want %d", nd.id, js.plan.nodes[d].id, r.Value, err, want)
		}
		ups[k] = r.Value
	}
	var err error
	switch {
	case nd.kind == stressTransient && js.runs[nd.id] <= nd.fails:
		err = fmt.Errorf("%s is down", nd.id)
		ep.failed[nd.id] = true
	case nd.kind == stressBroken:
		err = fmt.Errorf("%s is broken", nd.id)
		ep.failed[nd.id] = true
	case nd.kind == stressSnooze && js.runs[nd.id] == 1:
		err = river.JobSnooze(time.Millisecond)
		ep.snoozed[nd.id] = true
	case nd.kind == stressSuspend && !js.approved[nd.id]:
		err = fmt.Errorf("%s needs approval", nd.id)
		ep.suspended[nd.id] = true
	default:
		ep.succeeded[nd.id] = true
		js.successes[nd.id]++
	}
	js.traceLocked("attempt %s: call %d: %s: %v", ep.key, call, nd.id, err)
	js.mu.Unlock()
	if call == js.plan.runningAt {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, rerr := Resume(rctx, p.client, jobID, map[string]any{nd.id: 1})
		cancel()
		js.mu.Lock()
		// A crash of the machine meanwhile ends the attempt, which this
		// worker outlives: the job may no longer be running.
		if !errors.Is(rerr, ErrJobRunning) && !(ep.crashed && errors.Is(rerr, ErrNotParked)) {
			js.problemLocked("Resume of the running job: %v, want ErrJobRunning", rerr)
		}
		js.mu.Unlock()
	}
	if err != nil {
		return 0, err
	}
	return stressValue(i, ups), nil
}

// checkSaved checks that metadata, the row of a job whose machine died
// in attempt ep, holds the result of every upstream of a node that had
// started in ep: with SaveEach, a node's result is saved before the
// nodes after it start.
func (js *stressJob) checkSaved(ep *stressEpoch, metadata string) {
	_, cp, _, err := parked([]byte(metadata))
	js.mu.Lock()
	defer js.mu.Unlock()
	if err != nil {
		js.problemLocked("reading the dead machine's row: %v", err)
		return
	}
	for i := range ep.started {
		for _, d := range js.plan.nodes[i].deps {
			if up := js.plan.nodes[d].id; cp[up] == nil {
				js.problemLocked("the machine died with %s started, and the row lacks the result of its upstream %s, though the Worker saves each node", js.plan.nodes[i].id, up)
			}
		}
	}
}

// stressWorker is the Worker of a machine, which checks each attempt's
// error against what the attempt's nodes did.
type stressWorker struct {
	*Worker[sumArgs]
	js *stressJob
	p  *stressProc
}

func (w stressWorker) Work(ctx context.Context, job *river.Job[sumArgs]) error {
	err := w.Worker.Work(ctx, job)
	w.js.checkAttempt(ctx, w.p, err)
	return err
}

// stressFailures is an attempt's error as JSON.
type stressFailures struct {
	Failed, Suspended []struct {
		ID  string
		Err *struct{ Text string }
	}
}

// checkAttempt checks err, the error of the attempt machine p ran with
// ctx, unless the machine crashed in it.
func (js *stressJob) checkAttempt(ctx context.Context, p *stressProc, err error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	ep := p.epoch
	p.epoch = nil
	if ep != nil && ctx.Err() != nil {
		// The machine stopped: a client being stopped may take the job
		// again, made available by the attempt it stopped, and stop the
		// new attempt before its nodes ran.
		ep.crashed = true
	}
	if p.dead || ep == nil || ep.crashed {
		return
	}
	js.ended[ep.key] = ep
	var (
		gfe  *GraphFailedError
		se   *SuspendedError
		text string
		raw  []byte
		jerr error
	)
	if err != nil {
		text = err.Error()
	}
	ids := func(fs []NodeFailure) map[string]bool {
		m := map[string]bool{}
		for _, f := range fs {
			m[f.ID] = true
		}
		return m
	}
	var failed map[string]bool
	switch {
	case len(ep.suspended) > 0:
		if !errors.As(err, &se) || !isJobCancel(err) {
			js.problemLocked("attempt with %v suspended: error %v, want a JobCancel of a *SuspendedError", slices.Sorted(maps.Keys(ep.suspended)), err)
			return
		}
		if got := ids(se.Suspended); !maps.Equal(got, ep.suspended) {
			js.problemLocked("SuspendedError names %v suspended, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(ep.suspended)))
		}
		for id := range ep.suspended {
			if want := fmt.Sprintf("%q (%s needs approval)", id, id); !strings.Contains(text, want) {
				js.problemLocked("the error %q lacks %s", text, want)
			}
		}
		if isJobSnooze(err) {
			js.problemLocked("the error of an attempt that parked the job holds a snooze, which River would obey: %v (%s)", err, errorTree(err))
		}
		failed = ids(se.Failed)
		raw, jerr = json.Marshal(se)
	case len(ep.failed) > 0 || len(ep.snoozed) > 0:
		if !errors.As(err, &gfe) {
			js.problemLocked("attempt with %v failed, %v snoozed: error %v, want a *GraphFailedError", slices.Sorted(maps.Keys(ep.failed)), slices.Sorted(maps.Keys(ep.snoozed)), err)
			return
		}
		if isJobSnooze(err) != (len(ep.snoozed) > 0) {
			js.problemLocked("attempt with %v snoozed: error %v, a snooze: %v", slices.Sorted(maps.Keys(ep.snoozed)), err, isJobSnooze(err))
		}
		failed = ids(gfe.Failed)
		if !failed["end"] {
			js.problemLocked("GraphFailedError %q does not name the sink end", text)
		}
		for id := range ep.failed {
			if want := fmt.Sprintf("%q failed (%s is ", id, id); !strings.Contains(text, want) {
				js.problemLocked("the error %q lacks %s", text, want)
			}
		}
		raw, jerr = json.Marshal(gfe)
	default:
		if err != nil || !ep.endRan {
			js.problemLocked("attempt where every node succeeded: error %v, end ran: %v", err, ep.endRan)
		}
		return
	}
	for id := range ep.failed {
		if !failed[id] {
			js.problemLocked("the error %q does not name %s, which failed", text, id)
		}
	}
	for id := range ep.snoozed {
		if !failed[id] {
			js.problemLocked("the error %q does not name %s, which snoozed", text, id)
		}
	}
	for id := range failed {
		if ep.succeeded[id] {
			js.problemLocked("the error %q names %s, which succeeded", text, id)
		}
	}
	var back stressFailures
	if jerr == nil {
		jerr = json.Unmarshal(raw, &back)
	}
	if jerr != nil {
		js.problemLocked("the error as JSON: %v", jerr)
		return
	}
	for _, f := range slices.Concat(back.Failed, back.Suspended) {
		want := ""
		switch {
		case ep.failed[f.ID] && js.planned(f.ID) == stressBroken:
			want = f.ID + " is broken"
		case ep.failed[f.ID]:
			want = f.ID + " is down"
		case ep.suspended[f.ID]:
			want = f.ID + " needs approval"
		default:
			continue
		}
		if f.Err == nil || f.Err.Text != want {
			js.problemLocked("the error's JSON %s gives %s the error %+v, want %q", raw, f.ID, f.Err, want)
		}
	}
}

func (js *stressJob) planned(id string) stressKind {
	for _, nd := range js.plan.nodes {
		if nd.id == id {
			return nd.kind
		}
	}
	return -1
}

// TestRandomGraphsSurviveCrashesAndResumes runs random plans (see the
// top of this file) and checks the package's promises on each.
func TestRandomGraphsSurviveCrashesAndResumes(t *testing.T) {
	jobs := 10
	if s := os.Getenv("ASYNCTOOL_DURABLE_STRESS_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		jobs = n
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("ASYNCTOOL_DURABLE_STRESS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		seed = n
	}
	for k := range int64(jobs) {
		plan := newStressPlan(seed + k)
		t.Run(fmt.Sprintf("seed=%d", plan.seed), func(t *testing.T) {
			t.Parallel() // each job has its own database
			runStressPlan(t, plan)
		})
	}
}

// runStressPlan runs one job of plan to its end and checks it.
func runStressPlan(t *testing.T, plan stressPlan) {
	js := &stressJob{plan: plan, path: filepath.Join(t.TempDir(), "river.db"), crashes: make(chan stressCrash, 8),
		runs: map[string]int{}, ended: map[string]*stressEpoch{}, successes: map[string]int{}, stored: map[string]bool{}, decided: map[string]int{}, approved: map[string]bool{}}
	js.obs = openStressDB(t, js.path)
	mig, err := rivermigrate.New(riversqlite.New(js.obs), nil)
	require.NoError(t, err)
	_, err = mig.Migrate(context.Background(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	t.Logf("plan: %+v", plan)
	r := rand.New(rand.NewSource(plan.seed ^ 0x5eed))
	ctx := context.Background()

	p := js.start(t)
	res, err := p.client.Insert(ctx, sumArgs{Base: int(plan.seed)}, &river.InsertOpts{MaxAttempts: stressMaxAttempts})
	require.NoError(t, err)
	id := res.Job.ID
	parks := 0
	timeout := time.After(time.Minute)
	for {
		var ev *river.Event
		var crash *stressCrash
		select {
		case c := <-js.crashes:
			crash = &c
		case ev = <-p.events:
			// A crash is reported before its attempt ends: the event is
			// the crashed attempt's.
			select {
			case c := <-js.crashes:
				crash = &c
			default:
			}
		case <-timeout:
			js.mu.Lock()
			defer js.mu.Unlock()
			t.Fatalf("seed %d: the job did not end in a minute; problems: %v\nwhat happened:\n%s", plan.seed, js.problems, strings.Join(js.trace, "\n"))
		}
		if crash != nil {
			require.Same(t, p, crash.proc, "a crash of a machine that no longer runs the job")
			p = js.crash(t, p, id, *crash)
			continue
		}
		js.traceEvent("event %s: attempt %s, %s; stored %s", ev.Kind, attemptKey(ev.Job), ev.Job.State, storedIDs(ev.Job.Metadata))
		switch ev.Kind {
		case river.EventKindJobFailed:
			js.markStored(ev.Job.Metadata)
			js.checkStored(ev)
			if ev.Job.State == rivertype.JobStateDiscarded {
				js.finish(t, p, ev, parks)
				return
			}
		case river.EventKindJobCompleted:
			js.finish(t, p, ev, parks)
			return
		case river.EventKindJobSnoozed:
			js.markStored(ev.Job.Metadata)
			js.checkStored(ev)
		case river.EventKindJobCancelled:
			js.markStored(ev.Job.Metadata)
			js.checkStored(ev)
			parks++
			js.resume(t, r, p, ev, parks)
		default:
			t.Fatalf("unexpected event %s: %v", ev.Kind, ev.Job.Errors)
		}
	}
}

// checkStored checks that the row of the job, whose attempt ev says
// failed or parked it, holds the results of the nodes that succeeded in
// that attempt.
func (js *stressJob) checkStored(ev *river.Event) {
	js.mu.Lock()
	defer js.mu.Unlock()
	ep := js.ended[attemptKey(ev.Job)]
	if ep == nil {
		return // the attempt crashed
	}
	js.checkedStored++
	for id := range ep.succeeded {
		if !js.stored[id] {
			js.problemLocked("%s succeeded in attempt %s, which ended %s, and the job's row does not hold its result", id, ep.key, ev.Kind)
		}
	}
}

// errorTree describes err's tree, with each error's type.
func errorTree(err error) string {
	switch e := err.(type) {
	case nil:
		return "nil"
	case interface{ Unwrap() []error }:
		var parts []string
		for _, x := range e.Unwrap() {
			parts = append(parts, errorTree(x))
		}
		return fmt.Sprintf("%T[%s]", err, strings.Join(parts, ", "))
	case interface{ Unwrap() error }:
		return fmt.Sprintf("%T{%s}", err, errorTree(e.Unwrap()))
	}
	return fmt.Sprintf("%T", err)
}

// storedIDs lists the results that metadata, a job's, holds.
func storedIDs(metadata []byte) string {
	_, cp, _, err := parked(metadata)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(slices.Sorted(maps.Keys(cp)))
}

// attemptKey tells the attempts of a job apart by the time they started:
// an attempt that a snooze or a stop ended does not count, and the next
// one has its number.
func attemptKey(row *rivertype.JobRow) string {
	if row.AttemptedAt == nil {
		return "never"
	}
	return row.AttemptedAt.UTC().Format(time.RFC3339Nano)
}

// crash handles a crash of machine p and returns the machine that takes
// the job over.
func (js *stressJob) crash(t *testing.T, p *stressProc, id int64, c stressCrash) *stressProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch c.kind {
	case crashStop:
		require.NoError(t, p.client.StopAndCancel(ctx))
		row, err := p.client.JobGet(ctx, id)
		require.NoError(t, err)
		if row.State != rivertype.JobStateAvailable {
			t.Fatalf("seed %d: after StopAndCancel the job is %s, want available; problems: %v", js.plan.seed, row.State, js.problems)
		}
		js.markStored(row.Metadata)
	case crashDeath:
		require.NoError(t, c.err, "reading the row of the dead machine's job")
		js.traceEvent("the dead machine's row: attempt %d, stored %s", c.attempt, storedIDs([]byte(c.metadata)))
		require.NoError(t, p.client.Stop(ctx))
		// What River's rescuer leaves: the row as the dead process left
		// it, available for another attempt.
		_, err := js.obs.ExecContext(ctx, `UPDATE river_job SET state = 'available', attempt = ?, metadata = jsonb(?), finalized_at = NULL WHERE id = ?`,
			c.attempt, c.metadata, id)
		require.NoError(t, err)
		js.markStored([]byte(c.metadata))
		js.mu.Lock()
		js.deaths++
		js.mu.Unlock()
	}
	return js.start(t)
}

// resume handles the park ev of the job: it checks it, and resumes the
// job, giving some suspended nodes values, approving others.
func (js *stressJob) resume(t *testing.T, r *rand.Rand, p *stressProc, ev *river.Event, parks int) {
	t.Helper()
	ctx := context.Background()
	require.NotEmpty(t, ev.Job.Errors)
	text := ev.Job.Errors[len(ev.Job.Errors)-1].Error
	js.mu.Lock()
	ep := js.last
	js.mu.Unlock()
	if ep == nil || len(ep.suspended) == 0 {
		t.Fatalf("seed %d: the job was cancelled, with no node suspended: %s; problems: %v", js.plan.seed, text, js.problems)
	}
	if !strings.Contains(text, "resume the job with durable.Resume") {
		js.problem("the parked job's error %q does not say to resume it", text)
	}
	_, err := Resume(ctx, p.client, ev.Job.ID, map[string]any{"nope": 1})
	if err == nil || !strings.Contains(err.Error(), `no checkpointed node "nope"`) {
		js.problem("Resume with an unknown id: %v", err)
	}
	values := map[string]any{}
	js.mu.Lock()
	for _, id := range slices.Sorted(maps.Keys(ep.suspended)) {
		switch k := r.Intn(10); {
		case k < 5:
			v := r.Intn(1000003)
			values[id], js.decided[id], js.stored[id] = v, v, true
		case k < 8 || parks >= 3:
			js.approved[id] = true
		}
	}
	if r.Intn(4) == 0 {
		// A node that has no result yet may be given one too.
		var open []string
		for _, nd := range js.plan.nodes {
			if _, given := values[nd.id]; !given && !js.stored[nd.id] && nd.kind != stressBroken {
				open = append(open, nd.id)
			}
		}
		if len(open) > 0 {
			id := open[r.Intn(len(open))]
			v := r.Intn(1000003)
			values[id], js.decided[id], js.stored[id] = v, v, true
		}
	}
	js.mu.Unlock()
	js.traceEvent("Resume with %v, approved %v", values, js.approved)
	row, err := Resume(ctx, p.client, ev.Job.ID, values)
	require.NoError(t, err, "Resume with %v", values)
	if row.State != rivertype.JobStateAvailable && row.State != rivertype.JobStateRunning {
		js.problem("Resume returned the job %s", row.State)
	}
}

// finish checks the job's end, ev.
func (js *stressJob) finish(t *testing.T, p *stressProc, ev *river.Event, parks int) {
	t.Helper()
	_, err := Resume(context.Background(), p.client, ev.Job.ID, nil)
	if !errors.Is(err, ErrNotParked) {
		js.problem("Resume of the finished job: %v, want ErrNotParked", err)
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	switch {
	case js.plan.broken && ev.Kind == river.EventKindJobCompleted:
		js.problemLocked("the job completed, though a node always fails")
	case !js.plan.broken && ev.Kind != river.EventKindJobCompleted:
		js.problemLocked("the job ended %s, not completed: %v", ev.Job.State, ev.Job.Errors)
	case js.plan.broken:
		text := ev.Job.Errors[len(ev.Job.Errors)-1].Error
		for _, nd := range js.plan.nodes {
			if nd.kind == stressBroken && js.last.failed[nd.id] && !strings.Contains(text, fmt.Sprintf("%q failed (%s is broken)", nd.id, nd.id)) {
				js.problemLocked("the discarded job's last error %q does not name %s", text, nd.id)
			}
		}
	default:
		if !js.last.endRan {
			js.problemLocked("the job completed, and end did not run in its last attempt")
		}
	}
	for _, nd := range js.plan.nodes {
		_, decided := js.decided[nd.id]
		s := js.successes[nd.id]
		// A success in an attempt that crashed may be lost: a worker that
		// outlived its run, or one a dead machine did not save.
		lost := 0
		for _, ep := range js.epochs {
			if ep.crashed && ep.succeeded[nd.id] {
				lost++
			}
		}
		switch {
		case s > 1+lost:
			js.problemLocked("%s's worker succeeded %d times, %d of them in attempts that crashed", nd.id, s, lost)
		case ev.Kind == river.EventKindJobCompleted && !decided && s == 0:
			js.problemLocked("%s's worker never succeeded, and the job completed", nd.id)
		}
	}
	t.Logf("%d parks, %d deaths, %d attempts' checkpoints checked, runs %v, decided %v", parks, js.deaths, js.checkedStored, js.runs, js.decided)
	if len(js.problems) > 0 {
		t.Errorf("seed %d: %d problem(s):\n%s\nwhat happened:\n%s", js.plan.seed, len(js.problems), strings.Join(js.problems, "\n"), strings.Join(js.trace, "\n"))
	}
}
