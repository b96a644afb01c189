package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// cursorKey is the key of River's resumable step cursors in a job's
// metadata (github.com/riverqueue/river/internal/rivercommon), which
// Resume edits from outside the job. It is River's, not ours: the test of
// Resume fails if River moves it.
const cursorKey = "river:resumable_cursor"

// ErrJobRunning is returned by Resume for a job that is running: its
// attempt would overwrite the checkpoint Resume stores.
var ErrJobRunning = errors.New("durable: the job is running")

// Resume resumes a job, usually one parked by a suspended node (see
// [SuspendedError]), in one transaction: it stores values, by node id, in
// the job's checkpoint as results of checkpointed nodes (made with
// [Node]), and makes the job available at once with Client.JobRetry.
//
// On the next attempt, a node given a value is replayed with it instead
// of running, as if an earlier attempt had returned it: this is how a
// person decides a suspended node's result (the seed's special API for a
// PENDING node; asynctool.SucceedWith within one process). The value must
// encode as JSON into the node's result type; one that does not decode
// into it makes the node run again, and an id the graph has no
// checkpointed node for is dropped. Nodes given no value run again, as on
// any retry, unless an earlier attempt checkpointed them: with no values
// at all, Resume is Client.JobRetry, and the suspended nodes run again. To
// end a parked job instead, leave it cancelled, or delete it.
//
// A running job is refused with [ErrJobRunning]; a job Resume does not
// find, with River's rivertype.ErrNotFound.
func Resume[TTx any](ctx context.Context, client *river.Client[TTx], jobID int64, values map[string]any) (*rivertype.JobRow, error) {
	drv := client.Driver()
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
	if len(values) > 0 {
		update, err := withValues(row.Metadata, values)
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
	}
	if row, err = client.JobRetryTx(ctx, tx, jobID); err != nil {
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

// withValues returns the metadata update that adds values to the
// checkpoint in metadata, a job's: River's cursors, with this package's
// step's cursor extended.
func withValues(metadata []byte, values map[string]any) ([]byte, error) {
	var meta map[string]json.RawMessage
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &meta); err != nil {
			return nil, fmt.Errorf("reading the job's metadata: %w", err)
		}
	}
	cursors := map[string]json.RawMessage{}
	if raw, ok := meta[cursorKey]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &cursors); err != nil {
			return nil, fmt.Errorf("reading River's cursors: %w", err)
		}
	}
	cp := map[string]json.RawMessage{}
	if raw, ok := cursors[stepName]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &cp); err != nil {
			return nil, fmt.Errorf("reading the checkpoint: %w", err)
		}
	}
	for id, v := range values {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("the value of node %q: %w", id, err)
		}
		cp[id] = b
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return nil, err
	}
	cursors[stepName] = b
	return json.Marshal(map[string]any{cursorKey: cursors})
}
