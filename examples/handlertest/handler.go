// Command handlertest shows how to unit-test a service handler that fans
// out through asynctool, with the fakes of package asynctooltest (see
// handler_test.go).
//
// The handler renders a user's home page from three backends:
//
//	user ──must─────▶ page
//	cart ──optional─▶ page   (default: 0 items)
//	recs ──optional─▶ page   (default: bestsellers)
//
// The page ends the run (EndsRun): the handler answers as soon as the page
// is rendered, and an optional backend still running then is stopped.
// The backends are injected as workers, so a test swaps them for fakes.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asynctool-go/asynctool"
)

// Backends are the RPCs behind the page, one worker each.
type Backends struct {
	User asynctool.Worker[int64, string]
	Cart asynctool.Worker[int64, int]
	Recs asynctool.Worker[int64, []string]
}

// Graph builds the page's graph for uid and returns its start nodes and
// the node that renders the page.
func (b Backends) Graph(uid int64) ([]asynctool.Wrapper, *asynctool.WorkerWrapper[int64, string]) {
	user := asynctool.NewWrapper("user", b.User, uid)
	cart := asynctool.NewWrapper("cart", b.Cart, uid).Default(0)
	recs := asynctool.NewWrapper("recs", b.Recs, uid).Default([]string{"bestsellers"})
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int64, string](render), uid).
		Depend(user, true).
		Depend(cart, false).
		Depend(recs, false).
		EndsRun() // the response goes out with the page: slow optional backends are stopped then
	return []asynctool.Wrapper{user, cart, recs}, page
}

// render writes the page from whatever the backends returned. An optional
// backend that failed or has not answered yet reads as its default.
func render(_ context.Context, _ int64, all asynctool.Wrappers) (string, error) {
	u, errU := asynctool.ResultOf[string](all, "user")
	c, errC := asynctool.ResultOf[int](all, "cart")
	r, errR := asynctool.ResultOf[[]string](all, "recs")
	if err := errors.Join(errU, errC, errR); err != nil {
		return "", err // a mistyped id or result type: a bug, not a backend down
	}
	items, recs := c.Value, r.Value
	if c.State == asynctool.ResultDefault {
		items = 0
	}
	if r.State == asynctool.ResultDefault {
		recs = []string{"bestsellers"}
	}
	return fmt.Sprintf("Hello %s: %d items; try %s", u.Value, items, strings.Join(recs, ", ")), nil
}

// Handler serves the page at /?uid=N.
type Handler struct {
	Async    *asynctool.Async
	Backends Backends
	// Timeout bounds the whole fan-out.
	Timeout time.Duration
}

// ServeHTTP renders the page: 200 with the page, 400 for a bad uid, 502
// when the user backend failed, 504 when the deadline passed first, 503
// when the graph did not run at all (the Async was closed: the server is
// shutting down).
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	uid, err := strconv.ParseInt(req.URL.Query().Get("uid"), 10, 64)
	if err != nil {
		http.Error(w, "bad uid", http.StatusBadRequest)
		return
	}
	starts, page := h.Backends.Graph(uid)
	err = h.Async.BeginWork(req.Context(), h.Timeout, starts...)
	switch res := page.Result(); res.State {
	case asynctool.ResultSuccess:
		fmt.Fprintln(w, res.Value)
	case asynctool.ResultTimeout:
		http.Error(w, "too slow", http.StatusGatewayTimeout)
	case asynctool.ResultException:
		http.Error(w, "backend failed: "+res.Err.Error(), http.StatusBadGateway)
	default:
		// ResultDefault: the page never ended, because BeginWork refused
		// the graph before running anything (ErrClosed, or a *GraphError),
		// so the page has no error of its own: BeginWork's says why.
		http.Error(w, "not served: "+err.Error(), http.StatusServiceUnavailable)
	}
}

func main() {
	a := asynctool.New()
	defer a.Close()
	h := &Handler{Async: a, Timeout: time.Second, Backends: Backends{
		User: asynctool.WorkerFunc[int64, string](func(context.Context, int64, asynctool.Wrappers) (string, error) {
			time.Sleep(10 * time.Millisecond) // the slow backend: the others answer first
			return "ada", nil
		}),
		Cart: asynctool.WorkerFunc[int64, int](func(context.Context, int64, asynctool.Wrappers) (int, error) { return 3, nil }),
		Recs: asynctool.WorkerFunc[int64, []string](func(context.Context, int64, asynctool.Wrappers) ([]string, error) {
			return []string{"lamp", "book"}, nil
		}),
	}}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/?uid=42", nil))
	fmt.Fprint(os.Stdout, rec.Code, " ", rec.Body.String()) // 200 Hello ada: ...
}
