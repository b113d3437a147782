//===- ChoiceILP.h - one choice per node, pairwise costs, by CBC -*- C++ -*-===//
//
// The integer program at the heart of the per-op sharding search
// (OpShardingSearch.h), kept free of MLIR so it can be tested against brute
// force: every node picks one of its choices; a choice costs something of
// its own and holds some memory; an edge between two nodes costs an amount
// that depends on both choices, through classes (the producer's choices that
// write the same sharding form one class, the consumer's that read the same
// one another), so an edge's table is classes x classes, not choices x
// choices. Minimise the total cost with the memory held at most a limit.
//
// The formulation is Alpa's (Zheng et al. 2022, "Alpa: Automating Inter-
// and Intra-Operator Parallelism for Distributed Deep Learning", section
// 4.2): binary s_u per node, and per edge a product variable e_uv linearised
// by its marginals. Here the marginals are taken over classes (for each
// producer class a, sum_b e_ab = sum of s_u over a's choices; for each
// consumer class b, sum_a e_ab = sum of s_v over b's choices), which with
// binary s forces e to the one pair chosen, so e may stay continuous.
//
// Before CBC sees it, the program is made smaller without changing its
// optimum (reduceChoices): nodes that one or two neighbours decide (chains
// of elementwise ops, most of a graph's leaves) are taken out, and edges
// whose side has one class become costs of the other side's choices. A
// resource shared by some pairs (one call for every gradient reduction that
// rides in a bucket) would tie every node that may need it together, so the
// two cases, paying for it and avoiding it, are solved apart and the cheaper
// answer taken. CBC (COIN-OR branch and cut) solves each.
//
// The shared pairs (a train step's bucketed gradient reductions) may run
// behind some of the chosen choices' time (their cover: the backward's
// compute), so the total is less min(shared, cover), a term of every node
// at once. It is priced by weighting (a Lagrangian relaxation of the one
// row it would need): at weight w in [0, 1] the shared pairs cost w times
// their cost and each choice w times its cover less, a program like the
// others whose optimum bounds the total's from below; the weight is moved
// to where the answers' shared cost and cover cross, and the best answer
// taken.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_AUTOSHARD_CHOICEILP_H
#define PARTITA_PASSES_AUTOSHARD_CHOICEILP_H

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace partita::autoshard {

/// A cost that forbids the pair (or choice) it is given to.
inline constexpr double kForbidden = std::numeric_limits<double>::infinity();

struct ChoiceNode {
  /// The cost of each choice (kForbidden: never chosen).
  std::vector<double> costs;
  /// The memory each choice holds (bytes); empty: none.
  std::vector<double> memory;
  /// The seconds of each choice that the shared pairs' costs may run behind
  /// (a train step's backward compute, which its bucketed gradient
  /// reductions overlap), between 0 and the choice's cost; empty: none.
  std::vector<double> cover;
};

struct ChoiceEdge {
  int64_t from = 0, to = 0;
  /// The class of each choice of `from` and of `to`.
  std::vector<int64_t> fromClass, toClass;
  /// cost[a][b]: the cost when `from` picks a choice of class a and `to` one
  /// of class b (kForbidden: never both).
  std::vector<std::vector<double>> cost;
  /// shared[a][b]: the pair also needs the problem's shared resource (empty:
  /// no pair does).
  std::vector<std::vector<char>> shared;
  /// sharedSeconds[a][b]: of a shared pair's cost, the part that rides with
  /// the shared resource (a bucketed reduction's bytes, not a gather after
  /// it), which the cover may hide; between 0 and the cost (empty: all of
  /// it).
  std::vector<std::vector<double>> sharedSeconds;

  /// Whether the pair of classes (a, b) needs the shared resource.
  bool needsShared(int64_t a, int64_t b) const {
    return !shared.empty() && shared[a][b];
  }
  /// What of the pair's cost rides with the shared resource (0 when it does
  /// not need it).
  double hideable(int64_t a, int64_t b) const {
    if (!needsShared(a, b))
      return 0;
    return sharedSeconds.empty() ? cost[a][b] : sharedSeconds[a][b];
  }
};

struct ChoiceProblem {
  std::vector<ChoiceNode> nodes;
  std::vector<ChoiceEdge> edges;
  /// The most memory the chosen choices may hold together; <= 0: no limit.
  double memoryLimit = 0;
  /// Paid once when any chosen pair needs the shared resource (a bucket of
  /// gradient reductions: one communicator call, however many ride in it).
  double sharedCost = 0;
  /// sharedCost is paid (and may hide) whether or not a chosen pair needs
  /// the resource: the case of the choices that pay it, solved apart.
  bool sharedPaid = false;
  // The total of some choices is their node and edge costs, and sharedCost
  // if any chosen pair needs the shared resource, less what is hidden:
  // min(the chosen shared pairs' hideable costs and sharedCost, the chosen
  // choices' cover).
};

struct ChoiceOptions {
  /// CBC gives up after this long and keeps the best solution it has.
  double timeLimitSeconds = 60;
  /// Only heuristicChoices, without CBC (no proof, and no memory limit).
  bool heuristicOnly = false;
  /// When the weighted programs leave a gap, the cover is priced exactly
  /// in one more program if the problem has at most this many columns
  /// (choices and class pairs; it cannot be made smaller first).
  int64_t exactCoverColumns = 20000;
};

/// How a solution was found.
enum class ChoiceMethod {
  /// CBC proved it optimal.
  Optimal,
  /// CBC's best when its time limit stopped it.
  TimeLimit,
  /// The greedy heuristic's (heuristicChoices), when CBC found nothing
  /// better in its time limit.
  Heuristic,
  /// The relaxation's largest choices improved by single moves, when CBC
  /// found nothing better in its time limit.
  Rounded,
  /// The best answer of the weighted programs that price the cover (each
  /// solved optimally), within ChoiceSolution::gap of their bound: the
  /// weighting left a gap it could not close.
  Bounded,
};

/// The size of what was solved: the nodes left by reduceChoices, the
/// integer programs CBC solved for them, and their variables and rows.
struct ProgramSize {
  int64_t solvedNodes = 0;
  /// 2 when the shared resource was both paid and avoided; one more for
  /// each weighted program that priced the cover.
  int64_t programs = 0;
  int64_t binaryVariables = 0, continuousVariables = 0, constraints = 0;

  /// Both programs' sizes: the larger of the nodes left, the rest summed.
  ProgramSize &operator+=(const ProgramSize &other) {
    solvedNodes = std::max(solvedNodes, other.solvedNodes);
    programs += other.programs;
    binaryVariables += other.binaryVariables;
    continuousVariables += other.continuousVariables;
    constraints += other.constraints;
    return *this;
  }
};

/// The number of classes of `classes` (one past the largest).
int64_t numClasses(const std::vector<int64_t> &classes);

struct ChoiceSolution {
  /// The choice of each node.
  std::vector<int64_t> choices;
  /// The total cost of those choices (node and edge costs, less what is
  /// hidden), and what is hidden.
  double cost = 0, hidden = 0;
  ChoiceMethod method = ChoiceMethod::Optimal;
  /// Bounded: how far above the best lower bound `cost` may be (seconds).
  double gap = 0;
  ProgramSize size;
};

/// The total cost of `choices` (kForbidden when a choice or pair is
/// forbidden), their memory through `memory`, and the seconds of the shared
/// pairs hidden behind their cover through `hidden`.
double evaluateChoices(const ChoiceProblem &problem,
                       const std::vector<int64_t> &choices,
                       double *memory = nullptr, double *hidden = nullptr);

/// A quick answer without CBC: each node in order takes its cheapest choice
/// against the nodes before it, then nodes move one at a time to their
/// cheapest choice against all their neighbours until none moves (iterated
/// conditional modes); the same moves also start from every node's first
/// choice (dist-auto-shard lists the unsplit one first), and the cheaper
/// end wins. It ignores the memory limit.
std::vector<int64_t> heuristicChoices(const ChoiceProblem &problem);

/// `choices` moved, one node at a time, to each node's cheapest choice
/// against all its neighbours (and the shared cost, paid by the move that
/// makes its first pair, and what the cover hides, from the totals of all
/// the others) until none moves: never costlier than they came. The memory
/// limit is ignored.
std::vector<int64_t> improveChoices(const ChoiceProblem &problem,
                                    std::vector<int64_t> choices);

/// Whether `choices` avoid every forbidden choice and pair and fit the
/// memory limit; their total cost through `cost`.
bool fitsProblem(const ChoiceProblem &problem,
                 const std::vector<int64_t> &choices, double &cost);

/// `problem`, which has no shared pairs or pays its shared resource
/// (sharedPaid), with the nodes that their neighbours decide taken out
/// (ChoiceReduction.cpp): a node without edges, or with edges to one or two
/// other nodes, whose choices hold no memory under the limit (and, paid,
/// have no cover and are on no pair that may hide; those pairs' edges stay
/// too). Its cheapest choice for each combination of its
/// neighbours' classes is kept, and that cost is moved onto the neighbour
/// (one) or onto an edge between the two (two). The optimum of what is left
/// plus `constant` is the optimum of `problem`, and `expand` maps any
/// choices of what is left to choices of `problem` that cost exactly that
/// much more. `problem` must be well formed (solveChoices checks it).
struct ReducedProblem {
  /// The nodes left and their edges.
  ChoiceProblem problem;
  /// Each node's index in `problem`, or -1 where it was taken out.
  std::vector<int64_t> kept;
  /// The cost of the nodes taken out with no neighbours left.
  double constant = 0;

  /// A node taken out: its choice for each combination of the classes its
  /// neighbours (none, one or two) take on the edges it had to them.
  struct Elimination {
    int64_t node = 0;
    std::vector<int64_t> neighbours;
    std::vector<std::vector<int64_t>> neighbourClasses;
    std::vector<std::vector<int64_t>> table;
  };
  /// In the order they were taken out; decided in the reverse one.
  std::vector<Elimination> eliminated;

  /// Choices for every node of the original problem, from choices for the
  /// nodes left.
  std::vector<int64_t> expand(const std::vector<int64_t> &leftChoices) const;
};

ReducedProblem reduceChoices(const ChoiceProblem &problem);

/// Solves `problem`: reduceChoices, then CBC on the nodes left. When CBC's
/// time limit stops it, the answer is the better of CBC's best and
/// heuristicChoices' on the nodes left (if that fits). A problem with cover
/// and shared pairs is solved as weighted programs (see the file comment),
/// at most 8. Fails, with the reason in `error`, when the problem is
/// malformed (a class or node index out of range, a node without choices,
/// a cover outside [0, cost]), when no choices fit the memory limit and
/// the forbidden pairs, or when neither finds a solution.
bool solveChoices(const ChoiceProblem &problem, const ChoiceOptions &options,
                  ChoiceSolution &solution, std::string &error);

} // namespace partita::autoshard

#endif // PARTITA_PASSES_AUTOSHARD_CHOICEILP_H
