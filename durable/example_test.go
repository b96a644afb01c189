package durable_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/durable"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	_ "modernc.org/sqlite"
)

// QuoteArgs is a job: price an order. Its graph fetches the price and the
// stock, which are slow and checkpointed, and then books the order.
type QuoteArgs struct {
	Order string `json:"order"`
}

func (QuoteArgs) Kind() string { return "quote" }

type soon struct{}

func (soon) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(10 * time.Millisecond) }

// A job whose booking fails on its first attempt is retried by River; the
// retry replays the price and the stock from the checkpoint River stored
// with the failed attempt, and only books again.
func ExampleNewWorker() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "durable-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", filepath.Join(dir, "jobs.db"))
	defer db.Close()
	db.SetMaxOpenConns(1)
	mig, _ := rivermigrate.New(riversqlite.New(db), nil)
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		fmt.Println(err)
		return
	}

	async := asynctool.New()
	defer async.Close()
	var bookings atomic.Int32
	worker, err := durable.NewWorker(async, 5*time.Second, func(ctx context.Context, job *river.Job[QuoteArgs], cp *durable.Checkpoint) ([]asynctool.Wrapper, error) {
		price := durable.Node(cp, "price", asynctool.WorkerFunc[string, int](func(context.Context, string, asynctool.Wrappers) (int, error) {
			fmt.Println("fetching the price of", job.Args.Order)
			return 42, nil
		}), job.Args.Order)
		stock := durable.Node(cp, "stock", asynctool.WorkerFunc[string, int](func(context.Context, string, asynctool.Wrappers) (int, error) {
			fmt.Println("fetching the stock of", job.Args.Order)
			return 7, nil
		}), job.Args.Order)
		asynctool.NewWrapper("book", asynctool.WorkerFunc[string, string](func(_ context.Context, order string, all asynctool.Wrappers) (string, error) {
			if bookings.Add(1) == 1 {
				return "", errors.New("booking service unavailable")
			}
			p, _ := asynctool.ResultOf[int](all, "price")
			s, _ := asynctool.ResultOf[int](all, "stock")
			fmt.Printf("booked %s at %d (%d in stock), attempt %d, %d node(s) replayed\n", order, p.Value, s.Value, job.Attempt, cp.Replayed())
			return "ok", nil
		}), job.Args.Order).Depend(price, true).Depend(stock, true)
		return []asynctool.Wrapper{price, stock}, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riversqlite.New(db), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       soon{},
		Workers:           workers,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx)

	if _, err := client.Insert(ctx, QuoteArgs{Order: "A-17"}, nil); err != nil {
		fmt.Println(err)
		return
	}
	for ev := range events {
		fmt.Println("job", ev.Kind)
		if ev.Kind == river.EventKindJobCompleted {
			break
		}
	}
	// Unordered output:
	// fetching the price of A-17
	// fetching the stock of A-17
	// job job_failed
	// booked A-17 at 42 (7 in stock), attempt 2, 2 node(s) replayed
	// job job_completed
}
