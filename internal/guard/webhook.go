package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// The webhook (--notify URL): one JSON document per automatic action or
// would-be action (a hold, a monitor mode's would-hold, the disarmer
// tripping), POSTed off the request path. A receiver that hangs or is
// down never holds a hold up: documents wait in a bounded queue (a full
// queue drops the newest and says so), each POST has a short timeout and
// is retried twice.
const (
	webhookQueue    = 64
	webhookTimeout  = 2 * time.Second
	webhookAttempts = 3
)

// Notice is one webhook document.
type Notice struct {
	// ID is unique per action (the guard's pid and a count): a receiver
	// that sees it twice (a retry after a timeout) has one action.
	ID      string `json:"id"`
	Event   string `json:"event"`   // hold, would-hold, disarmed
	Trigger string `json:"trigger"` // growth (--auto N) or cap (--auto-on-cap)
	Host    string `json:"host"`
	Time    string `json:"time"`
	Path    string `json:"path,omitempty"`
	Live    int    `json:"live,omitempty"`
	// Container, Pod and Runtime: where the chain runs, "" on the host.
	Container string `json:"container,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Runtime   string `json:"runtime,omitempty"`
	// Limit is the cap that was hit (--auto-on-cap).
	Limit    *NoticeLimit `json:"limit,omitempty"`
	Command  []string     `json:"command,omitempty"`
	Outcome  string       `json:"outcome,omitempty"`
	Exit     *int         `json:"exit,omitempty"`
	Timeline string       `json:"timeline,omitempty"`
	Why      string       `json:"why,omitempty"`
}

// NoticeLimit is the limit a cap hold names.
type NoticeLimit struct {
	Group   string `json:"group"`
	PidsMax string `json:"pids_max"`
	Owner   string `json:"owner"`
	Before  int    `json:"refused_before"`
	After   int    `json:"refused_after"`
}

type webhook struct {
	url    string
	queue  chan Notice
	client *http.Client
	say    func(string)
	seq    atomic.Int64
	host   string
}

// startWebhook posts to url until ctx ends.
func startWebhook(ctx context.Context, url string, say func(string)) *webhook {
	host, _ := os.Hostname()
	w := &webhook{url: url, queue: make(chan Notice, webhookQueue), client: &http.Client{Timeout: webhookTimeout}, say: say, host: host}
	go w.run(ctx)
	return w
}

// send queues n; it never waits.
func (w *webhook) send(n Notice) {
	if w == nil {
		return
	}
	n.ID = strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(w.seq.Add(1), 10)
	n.Host, n.Time = w.host, time.Now().UTC().Format(time.RFC3339Nano)
	select {
	case w.queue <- n:
	default:
		w.say(fmt.Sprintf("warning: webhook: %d documents wait already; this %s was not sent", webhookQueue, n.Event))
	}
}

func (w *webhook) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-w.queue:
			w.post(ctx, n)
		}
	}
}

func (w *webhook) post(ctx context.Context, n Notice) {
	body, _ := json.Marshal(n)
	var err error
	for attempt := 0; attempt < webhookAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
		}
		var req *http.Request
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
		if err != nil {
			break
		}
		req.Header.Set("Content-Type", "application/json")
		var resp *http.Response
		resp, err = w.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 300 {
				return
			}
			err = fmt.Errorf("%s", resp.Status)
		}
	}
	w.say(fmt.Sprintf("warning: webhook: the %s of %s was not delivered to %s: %v", n.Event, n.Path, w.url, err))
}
