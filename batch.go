package asynctool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// BatchReport is what [RunBatches] did.
type BatchReport struct {
	// Pages is the number of non-empty pages fetched.
	Pages int
	// Items is the number of items fetched.
	Items int
	// Succeeded is the number of items whose process call returned nil.
	Succeeded int
	// Failed is the number of items whose process call returned an
	// error, panicked or called runtime.Goexit; each has an entry in
	// Failures.
	Failed int
	// Skipped is the number of items fetched but not processed because
	// the context ended first.
	Skipped int
	// Failures holds one error per failed item, ordered by page and
	// index.
	Failures []*BatchItemError
}

// Err returns the item failures joined with [errors.Join], or nil if no
// item failed.
func (r BatchReport) Err() error {
	errs := make([]error, len(r.Failures))
	for i, f := range r.Failures {
		errs[i] = f
	}
	return errors.Join(errs...)
}

// BatchItemError is the failure of one item in [RunBatches].
type BatchItemError struct {
	// Page is the page the item came from, counting from 0.
	Page int
	// Index is the item's position in its page.
	Index int
	// Err is what process returned, or a [*PanicError] if it panicked.
	Err error
}

func (e *BatchItemError) Error() string {
	return fmt.Sprintf("asynctool: page %d item %d: %v", e.Page, e.Index, e.Err)
}

// Unwrap returns Err.
func (e *BatchItemError) Unwrap() error { return e.Err }

// RunBatches processes a paged source: it calls fetch for page 0, 1, 2,
// ... on the calling goroutine, submits process for each item of a page
// to exec, and fetches the next page as soon as every item of the current
// one has been accepted. It stops when fetch returns an empty page, when
// fetch fails, or when ctx ends, and returns once every submitted item
// has been processed or skipped. The items of a fetch that returns an
// error are ignored, as Go's convention has it, and counted nowhere in
// the report: a fetch that claims rows must release those it does not
// return with a nil error, or nothing processes them.
//
// Backpressure comes from exec. With a [Pool] under [CallerRuns] (the
// default policy) or [Block], a full pool makes RunBatches process items
// itself or wait, so it fetches no faster than the pool processes and at
// most the pool's workers, queue and one page are in memory. A nil exec
// (or a nil func or pointer in it: a nil ExecutorFunc, *Pool or *Serial,
// say) means a [NewPool] with default
// options, closed before RunBatches returns. With an executor that never
// refuses, such as [GoExecutor], nothing bounds the work in flight. An
// item the executor refuses is processed on the calling goroutine.
//
// RunBatches waits on the calling goroutine for every item exec took,
// those still in its queue included. Called from one of exec's own tasks
// (a worker of an Async whose executor is the same [Pool], say), it holds
// that task's goroutine while it waits: if every worker of the pool does
// so, the queued items never start and RunBatches never returns. Give it
// an executor of its own there; a nil exec makes one.
//
// Items may still be running when the next page is fetched. A source
// that hands out "the next N unprocessed rows" must therefore claim the
// rows it returns (for example with an UPDATE that sets an owner), or it
// will return rows that are in flight again; and it ignores page, since
// an OFFSET of page times N over the rows still unprocessed passes over
// rows once earlier ones have left that set. page suits a source that
// does not change as items are processed.
//
// A failing item does not stop the run: it is counted and reported in
// [BatchReport.Failures], and a panic in process is recovered into a
// [*PanicError]; a process that calls runtime.Goexit fails its item with
// [ErrGoexit]. Items not yet started when ctx ends are skipped. The
// returned error is nil, the fetch error (wrapped with its page number),
// or context.Cause(ctx), or, when fetch failed and ctx ended too before
// every item had started, both joined ([errors.Join]): whenever
// [BatchReport.Skipped] is above 0, the error matches the cause with
// errors.Is. Item failures are only in the report. A nil fetch or
// process is an error, and a nil ctx is [ErrNilContext], returned before
// anything runs.
//
// A panic in fetch is not recovered: it goes on up RunBatches' caller's
// stack, as does a panic in exec's Submit and a runtime.Goexit in fetch
// or in a process that runs on the calling goroutine (an item the
// executor refused, or one a [CallerRuns] pool ran there). Before it
// does, RunBatches cancels the context of the items in flight and waits
// for them to return, so that none outlives it; the item whose Submit
// panicked is not waited for unless it had started, and does nothing if
// it starts later.
func RunBatches[T any](ctx context.Context, exec Executor,
	fetch func(ctx context.Context, page int) ([]T, error),
	process func(ctx context.Context, item T) error,
) (BatchReport, error) {
	switch {
	case fetch == nil:
		return BatchReport{}, errors.New("asynctool: RunBatches with a nil fetch")
	case process == nil:
		return BatchReport{}, errors.New("asynctool: RunBatches with a nil process")
	case ctx == nil:
		return BatchReport{}, ErrNilContext
	}
	if isNil(exec) {
		p := NewPool()
		defer p.Close()
		exec = p
	}
	var (
		report   BatchReport
		mu       sync.Mutex // guards report once items are in flight
		wg       sync.WaitGroup
		runErr   error
		finished bool
		// submitting is the number of the item whose Submit has not
		// returned, until its task starts (then -1), or, once RunBatches
		// unwinds out of that Submit, abandoned(it): the task then does
		// nothing if it ever starts, as wg no longer counts it.
		submitting atomic.Int64
		seq        int64
	)
	submitting.Store(-1)
	abandoned := func(seq int64) int64 { return -2 - seq }
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer func() {
		if !finished {
			// fetch panicked, or fetch or a process run on this goroutine
			// called runtime.Goexit, or the executor's Submit panicked: no
			// item may outlive RunBatches. An item whose Submit panicked
			// before its task started may never start: it is not waited
			// for.
			if s := submitting.Load(); s >= 0 && submitting.CompareAndSwap(s, abandoned(s)) {
				wg.Done()
			}
			cancel(errBatchAborted)
			wg.Wait()
		}
	}()
	record := func(page, index int, err error, skipped bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case skipped:
			report.Skipped++
		case err != nil:
			report.Failed++
			report.Failures = append(report.Failures, &BatchItemError{Page: page, Index: index, Err: err})
		default:
			report.Succeeded++
		}
	}
pages:
	for page := 0; ; page++ {
		if ctx.Err() != nil {
			runErr = context.Cause(ctx)
			break
		}
		items, err := fetch(ctx, page)
		if err != nil {
			runErr = fmt.Errorf("asynctool: fetching page %d: %w", page, err)
			break
		}
		if len(items) == 0 {
			break
		}
		mu.Lock()
		report.Pages++
		report.Items += len(items)
		mu.Unlock()
		for i, item := range items {
			if ctx.Err() != nil {
				mu.Lock()
				report.Skipped += len(items) - i
				mu.Unlock()
				runErr = context.Cause(ctx)
				break pages
			}
			wg.Add(1)
			seq++
			n := seq
			task := func() {
				if !submitting.CompareAndSwap(n, -1) && submitting.Load() == abandoned(n) {
					return // RunBatches unwound out of Submit without it
				}
				defer wg.Done()
				if ctx.Err() != nil {
					record(page, i, nil, true)
					return
				}
				returned := false
				defer func() {
					if !returned { // process called runtime.Goexit
						record(page, i, ErrGoexit, false)
					}
				}()
				err := processItem(ctx, process, item)
				returned = true
				record(page, i, err, false)
			}
			submitting.Store(n)
			err := exec.Submit(task)
			submitting.CompareAndSwap(n, -1)
			if err != nil {
				task()
			}
		}
	}
	wg.Wait()
	finished = true
	if cause := context.Cause(ctx); report.Skipped > 0 {
		// ctx ended while items waited: after the last page was fetched,
		// or while the fetch that failed ran. The skipped items need the
		// cause as much as the fetch error does.
		switch {
		case runErr == nil:
			runErr = cause
		case !errors.Is(runErr, cause):
			runErr = errors.Join(runErr, cause)
		}
	}
	slices.SortFunc(report.Failures, func(a, b *BatchItemError) int {
		return cmp.Or(cmp.Compare(a.Page, b.Page), cmp.Compare(a.Index, b.Index))
	})
	return report, runErr
}

// errBatchAborted is the cause of the items' context when RunBatches
// unwinds from a panic or a runtime.Goexit.
var errBatchAborted = errors.New("asynctool: RunBatches ended by a panic or runtime.Goexit on its goroutine")

// processItem calls process, turning a panic into a *PanicError.
func processItem[T any](ctx context.Context, process func(context.Context, T) error, item T) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError(r)
		}
	}()
	return process(ctx, item)
}
