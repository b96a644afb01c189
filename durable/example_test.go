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
	client, events, stop, err := startJobs(ctx, worker)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

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

// A payment above a limit needs a manager: its node fails under
// PolicySuspend, which parks the job (cancelled, with the reason in its
// row) instead of holding a worker. Once a manager has approved,
// durable.Resume resumes it: the order is not fetched again.
func ExampleSuspendedError() {
	ctx := context.Background()
	async := asynctool.New()
	defer async.Close()
	var approved atomic.Bool
	worker, err := durable.NewWorker(async, time.Minute, func(ctx context.Context, job *river.Job[QuoteArgs], cp *durable.Checkpoint) ([]asynctool.Wrapper, error) {
		order := durable.Node(cp, "order", asynctool.WorkerFunc[string, int](func(context.Context, string, asynctool.Wrappers) (int, error) {
			fmt.Println("fetching the order", job.Args.Order)
			return 900, nil
		}), job.Args.Order)
		asynctool.NewWrapper("charge", asynctool.WorkerFunc[string, string](func(_ context.Context, id string, all asynctool.Wrappers) (string, error) {
			amount, _ := asynctool.ResultOf[int](all, "order")
			if amount.Value > 500 && !approved.Load() {
				return "", fmt.Errorf("amount %d needs a manager's approval", amount.Value)
			}
			fmt.Printf("charged %s, attempt %d, %d node(s) replayed\n", id, job.Attempt, cp.Replayed())
			return "ok", nil
		}), job.Args.Order).Depend(order, true).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{order}, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	client, events, stop, err := startJobs(ctx, worker)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	res, err := client.Insert(ctx, QuoteArgs{Order: "A-18"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for ev := range events {
		if ev.Kind == river.EventKindJobCancelled {
			fmt.Println("job cancelled:", ev.Job.Errors[len(ev.Job.Errors)-1].Error)
			approved.Store(true)
			fmt.Println("approved by a manager")
			if _, err := durable.Resume(ctx, client, res.Job.ID, nil); err != nil {
				fmt.Println(err)
				return
			}
			continue
		}
		fmt.Println("job", ev.Kind)
		if ev.Kind == river.EventKindJobCompleted {
			break
		}
	}
	// Output:
	// fetching the order A-18
	// job cancelled: JobCancelError: durable: the graph suspended at "charge" (amount 900 needs a manager's approval); resume the job with durable.Resume
	// approved by a manager
	// charged A-18, attempt 2, 1 node(s) replayed
	// job job_completed
}

// startJobs runs worker on a River client over a new SQLite database in a
// temporary directory, and subscribes to the ends of jobs; stop stops the
// client and removes the database.
func startJobs(ctx context.Context, worker river.Worker[QuoteArgs]) (client *river.Client[*sql.Tx], events <-chan *river.Event, stop func(), err error) {
	dir, err := os.MkdirTemp("", "durable-example")
	if err != nil {
		return nil, nil, nil, err
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "jobs.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	db.SetMaxOpenConns(1) // riversqlite's advice: SQLite runs one operation at a time
	stop = func() {
		db.Close()
		os.RemoveAll(dir)
	}
	mig, err := rivermigrate.New(riversqlite.New(db), nil)
	if err == nil {
		_, err = mig.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err = river.NewClient(riversqlite.New(db), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       soon{},
		Workers:           workers,
	})
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	if err := client.Start(ctx); err != nil {
		cancel()
		stop()
		return nil, nil, nil, err
	}
	closeDB := stop
	stop = func() {
		cancel()
		client.Stop(ctx)
		closeDB()
	}
	return client, events, stop, nil
}
