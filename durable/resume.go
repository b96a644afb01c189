package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// cursorKey is the key of River's resumable step cursors in a job's
// metadata (github.com/riverqueue/river/internal/rivercommon), which
// Resume edits from outside the job. It is River's, not ours: the test of
// Resume fails if River moves it.
const cursorKey = "river:resumable_cursor"

// cleanedUp says, in Resume's error for a job it does not find, why a
// parked job can be gone.
const cleanedUp = "a parked job is a cancelled job to River, and River's JobCleaner deletes it once the client's CancelledJobRetentionPeriod (24 hours by default; -1 keeps it) has passed since it parked"

// uniqueFreed says, in Resume's error for a unique job that River cannot
// make available again, why that may be.
const uniqueFreed = "the job is unique, and a parked job, cancelled to River, frees its unique key unless its UniqueOpts.ByState has JobStateCancelled: another job with the same key may have been inserted since it parked"

// ErrJobRunning is returned by Resume for a job that is running: its
// attempt would overwrite the checkpoint Resume stores.
var ErrJobRunning = errors.New("durable: the job is running")

// ErrNotParked is returned by Resume for a job that a suspended node did
// not park: one that completed, waits for a retry, or was cancelled for
// another reason, or one whose parking attempt's checkpoint an attempt
// rescued as stuck replaced (see [Worker.SaveEach] and Resume); the error
// says which the job's row shows. Client.JobRetry runs such a job again.
var ErrNotParked = errors.New("durable: the job is not parked by a suspended node")

// Resume resumes a job that a suspended node parked (see
// [SuspendedError]), in one transaction: it stores values, by node id, in
// the job's checkpoint as results of checkpointed nodes (made with
// [Node]), and makes the job available at once with Client.JobRetry.
//
// On the next attempt, a node given a value is replayed with it instead
// of running, as if an earlier attempt had returned it: this is how a
// person decides a suspended node's result (asynctool.SucceedWith does
// it within one process). A node that a
// custom join suspended (DecideSuspend) is suspended again by its join
// while its upstreams still fail; the attempt then ends it with the value
// (by asynctool.Run.Resume) once the run stalls, and the nodes after it
// run. Nodes given no value run again, as on any retry, unless an earlier
// attempt checkpointed them: with no values at all, the suspended nodes
// run again (a node a custom join suspends again parks the job again).
// To end a parked job instead, leave it cancelled, or delete it.
//
// A nil ctx (asynctool.ErrNilContext) or client, or a zero client not
// made by river.NewClient, is an error.
//
// Resume checks what it can before it writes: the job must be parked (its
// last attempt cancelled it on a suspension), or it returns
// [ErrNotParked]; a running job is refused with [ErrJobRunning]; a job
// Resume does not find, with River's rivertype.ErrNotFound (a parked job
// is a cancelled one to River, whose JobCleaner deletes it once the
// CancelledJobRetentionPeriod of the client that leads, 24 hours by
// default, has passed since it parked; set it to -1 on every client to
// keep parked jobs until someone resumes them; on PostgreSQL, a Resume
// that comes as the cleaner deletes the job, its retention passed,
// returns the job made available, and the cleaner deletes it all the
// same, as its DELETE picks jobs without locking them and does not look
// again at the state of one that a transaction held meanwhile); a unique job
// (InsertOpts.UniqueOpts) that River cannot make available again, with
// River's error and why (parked, it is cancelled to River, which frees
// its unique key unless UniqueOpts.ByState has JobStateCancelled, so a
// job with the same key may have been inserted, and run, meanwhile); and
// every id in values must name a checkpointed node of the graph that
// parked the job, or the error names it; a value must encode as JSON
// that PostgreSQL can store ([ErrUnstorableJSON]); and a nil value (nil,
// or a nil pointer, slice or map) is refused for a node whose result type
// cannot be nil, such as an int or a struct ([ErrNilValue]), as
// asynctool.SucceedWith(nil) is within one process: stored as JSON null,
// it would decode as the zero value. What it cannot check is a value's
// type: the value must decode into the node's result type, and one that
// does not fails the node on the next attempt (with PolicySuspend, or
// suspended by a custom join, it parks the job again, with the decoding
// error), rather than running its worker again. So does a value that
// is JSON null for a node whose result type, in the graph of that
// attempt, does not take null (a nil value, where the graph that parked
// the job had a type that can be nil; or one that is not nil but encodes
// as null, such as json.RawMessage("null")), with ErrNilValue.
//
// An attempt that River rescued as stuck, and that ends after a later
// attempt parked the job, still has River merge its checkpoint into the
// job's row (River does so whatever the job's state), replacing the
// later one: Resume then returns ErrNotParked, as the row's mark, if
// any, names the earlier attempt, and Client.JobRetry runs the job from
// that checkpoint, which parks it again if the node still suspends.
func Resume[TTx any](ctx context.Context, client *river.Client[TTx], jobID int64, values map[string]any) (*rivertype.JobRow, error) {
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("durable: Resume of job %d: %w", jobID, asynctool.ErrNilContext)
	case client == nil:
		return nil, fmt.Errorf("durable: Resume of job %d with a nil *river.Client", jobID)
	}
	drv := client.Driver()
	if drv == nil {
		return nil, fmt.Errorf("durable: Resume of job %d with a zero river.Client: make it with river.NewClient", jobID)
	}
	execTx, err := drv.GetExecutor().Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: Resume: %w", err)
	}
	defer execTx.Rollback(ctx)
	// Lock the job's row before reading it (an update that changes
	// nothing: FOR UPDATE on PostgreSQL, the write lock on SQLite), so
	// that no claim and no other Resume comes between the read and the
	// writes: a Resume that read the checkpoint before another one wrote
	// it would drop the other's values.
	if _, err := execTx.JobUpdate(ctx, &riverdriver.JobUpdateParams{ID: jobID, Schema: client.Schema()}); err != nil {
		if errors.Is(err, rivertype.ErrNotFound) {
			return nil, fmt.Errorf("durable: Resume of job %d: %w (%s)", jobID, err, cleanedUp)
		}
		return nil, fmt.Errorf("durable: Resume of job %d: %w", jobID, err)
	}
	tx := drv.UnwrapTx(execTx)
	row, err := client.JobGetTx(ctx, tx, jobID)
	if err != nil {
		return nil, fmt.Errorf("durable: Resume of job %d: %w", jobID, err)
	}
	if row.State == rivertype.JobStateRunning {
		return nil, fmt.Errorf("%w: job %d", ErrJobRunning, jobID)
	}
	cursors, cp, mark, err := parked(row.Metadata)
	if err != nil {
		return nil, fmt.Errorf("durable: Resume of job %d: %w", jobID, err)
	}
	// The mark must be the last attempt's: one that ended before it
	// stored a checkpoint leaves an earlier attempt's in the row.
	if row.State != rivertype.JobStateCancelled || mark == nil || len(mark.Suspended) == 0 || mark.Attempt != row.Attempt {
		return nil, fmt.Errorf("%w: %s", ErrNotParked, notParked(row, mark))
	}
	update, err := withValues(cursors, cp, mark, values)
	if err != nil {
		return nil, fmt.Errorf("durable: Resume of job %d: %w", jobID, err)
	}
	if _, err := execTx.JobUpdate(ctx, &riverdriver.JobUpdateParams{
		ID:              jobID,
		MetadataDoMerge: true,
		Metadata:        update,
		Schema:          client.Schema(),
	}); err != nil {
		return nil, fmt.Errorf("durable: Resume of job %d: storing the values: %w", jobID, err)
	}
	unique := row.UniqueKey != nil && !slices.Contains(row.UniqueStates, rivertype.JobStateCancelled)
	if row, err = client.JobRetryTx(ctx, tx, jobID); err != nil {
		if unique {
			return nil, fmt.Errorf("durable: Resume of job %d: making it available again: %w (%s)", jobID, err, uniqueFreed)
		}
		return nil, fmt.Errorf("durable: Resume of job %d: %w", jobID, err)
	}
	if row.State == rivertype.JobStateRunning {
		return nil, fmt.Errorf("%w: job %d", ErrJobRunning, jobID) // the writes roll back
	}
	if err := execTx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("durable: Resume of job %d: %w", jobID, err)
	}
	return row, nil
}

// notParked says why row, a job Resume finds with mark (nil if none) in
// its checkpoint, is not parked.
func notParked(row *rivertype.JobRow, mark *parkMark) string {
	const overwritten = "or an attempt that River rescued as stuck, still running when a later attempt parked the job, stored its checkpoint over that attempt's"
	switch {
	case row.State != rivertype.JobStateCancelled:
		return fmt.Sprintf("job %d is %s", row.ID, row.State)
	case mark != nil && len(mark.Suspended) > 0:
		return fmt.Sprintf("job %d is cancelled, and the park mark in its checkpoint is attempt %d's, not its last attempt's (%d): that attempt ended without storing a checkpoint, %s", row.ID, mark.Attempt, row.Attempt, overwritten)
	}
	return fmt.Sprintf("job %d is cancelled, and its checkpoint holds no park mark: it was cancelled for another reason (a river.JobCancel, Client.JobCancel), %s", row.ID, overwritten)
}

// parked reads, from a job's metadata, River's cursors, this package's
// checkpoint among them, and the checkpoint's park mark (nil if the last
// attempt did not park the job).
func parked(metadata []byte) (cursors, cp map[string]json.RawMessage, mark *parkMark, err error) {
	var meta map[string]json.RawMessage
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &meta); err != nil {
			return nil, nil, nil, fmt.Errorf("reading the job's metadata: %w", err)
		}
	}
	cursors = map[string]json.RawMessage{}
	if raw, ok := meta[cursorKey]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &cursors); err != nil {
			return nil, nil, nil, fmt.Errorf("reading River's cursors: %w", err)
		}
	}
	cp = map[string]json.RawMessage{}
	if raw, ok := cursors[stepName]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &cp); err != nil {
			return nil, nil, nil, fmt.Errorf("reading the checkpoint: %w", err)
		}
	}
	if raw, ok := cp[parkKey]; ok {
		mark = &parkMark{}
		if err := json.Unmarshal(raw, mark); err != nil {
			return nil, nil, nil, fmt.Errorf("reading the checkpoint's park mark: %w", err)
		}
	}
	return cursors, cp, mark, nil
}

// withValues returns the metadata update that adds values to cp, the
// checkpoint of a parked job, and records them in its mark.
func withValues(cursors, cp map[string]json.RawMessage, mark *parkMark, values map[string]any) ([]byte, error) {
	for _, id := range slices.Sorted(maps.Keys(values)) {
		if !slices.Contains(mark.Nodes, id) {
			if len(mark.Nodes) == 0 {
				return nil, fmt.Errorf("no checkpointed node %q in the graph that parked the job: it checkpoints no node, and only nodes made with Node take a value (suspended: %s)",
					id, strings.Join(mark.Suspended, ", "))
			}
			return nil, fmt.Errorf("no checkpointed node %q in the graph that parked the job (checkpointed: %s; suspended: %s)",
				id, strings.Join(mark.Nodes, ", "), strings.Join(mark.Suspended, ", "))
		}
		v := values[id]
		if isNil(v) && slices.Contains(mark.NotNil, id) {
			return nil, fmt.Errorf("the value of node %q is nil, and its result type cannot be nil: %w", id, ErrNilValue)
		}
		b, err := checkpointJSON(v)
		if err != nil {
			return nil, fmt.Errorf("the value of node %q: %w", id, err)
		}
		cp[id] = b
		if !slices.Contains(mark.Decided, id) {
			mark.Decided = append(mark.Decided, id)
		}
	}
	// Resumed: no longer parked (a later cancellation for another
	// reason must not look parked); Decided stays.
	mark.Suspended, mark.Nodes, mark.NotNil, mark.Attempt = nil, nil, nil, 0
	b, err := json.Marshal(mark)
	if err != nil {
		return nil, err
	}
	cp[parkKey] = b
	if b, err = json.Marshal(cp); err != nil {
		return nil, err
	}
	cursors[stepName] = b
	return json.Marshal(map[string]any{cursorKey: cursors})
}
