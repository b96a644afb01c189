package durable

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH110CleanerDeletesAParkedJob: to River a parked job is a cancelled
// one, which its JobCleaner (run by whichever client of the database is
// the leader) deletes once the client's CancelledJobRetentionPeriod, 24
// hours by default, has passed since the job was finalized. A job parked
// over a weekend was gone on Monday, and Resume said only "not found":
// its error now says why a parked job can vanish and what keeps it.
func TestH110CleanerDeletesAParkedJob(t *testing.T) {
	pool, schema, _, id := parkedOnly(t)
	_, err := pool.Exec(context.Background(), "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET finalized_at = now() - interval '25 hours' WHERE id = $1", id)
	require.NoError(t, err)
	// A machine starts with River's defaults and becomes the leader.
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{intNode(cp, "s", new(atomic.Int32), nil)}, nil
	}))
	client := newClientIn[pgx.Tx](t, riverpgxv5.New(pool), schema, workers, retryNow{})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := client.JobGet(context.Background(), id)
		if errors.Is(err, rivertype.ErrNotFound) {
			break
		}
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "the cleaner did not delete the parked job in 30 s")
		time.Sleep(50 * time.Millisecond)
	}
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 1})
	require.ErrorIs(t, err, rivertype.ErrNotFound)
	assert.Contains(t, err.Error(), "CancelledJobRetentionPeriod", "the error says why a parked job can be gone")
}
