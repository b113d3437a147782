//===- ChoiceReduction.cpp - nodes decided by their neighbours, taken out -===//
//
// See reduceChoices in ChoiceILP.h. The reductions are those of the
// partitioned boolean quadratic problem (Scholz and Eckstein 2002, "Register
// allocation for irregular architectures"; Hames and Scholz 2006), which is
// this program without its memory row and shared resource:
// - R0: a node with no edges takes its cheapest choice;
// - RI: a node with one neighbour takes, for each class of the neighbour's,
//   its cheapest choice against it; that cost moves onto the neighbour's
//   choices;
// - RII: a node with two neighbours takes, for each pair of their classes,
//   its cheapest choice against both; that cost becomes an edge between the
//   two (added to the one they may have already).
// Each keeps the optimum, so the program CBC solves is the rest of the graph,
// and each node taken out is decided afterwards from its neighbours' choices,
// in the reverse order. An edge whose side has one class is folded into the
// other side's costs first. A node that holds memory under a limit is never
// taken out: its choice matters to more than its neighbours; nor, in a
// program whose shared resource is paid (sharedPaid: the overlap priced
// exactly), a node with cover or on a pair that may hide, nor such an edge,
// for the same reason. Otherwise the program has no shared resource here:
// solveChoices solves the cases of paying and of avoiding it apart.
//
//===----------------------------------------------------------------------===//

#include "passes/autoshard/ChoiceILP.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

namespace partita::autoshard {

namespace {

/// An edge of the graph being reduced, with a < b: cost[ca][cb].
struct WorkEdge {
  int64_t a = 0, b = 0;
  std::vector<int64_t> aClass, bClass;
  std::vector<std::vector<double>> cost;
  /// A paid program's hideable part of each pair (empty: none), which its
  /// row needs: such an edge is never folded, and its nodes stay.
  std::vector<std::vector<double>> hideable;
  bool alive = true;
};

/// The classes of (x[s], y[s]) pairs, numbered densely in order of first
/// appearance, with the pair of each class.
std::vector<int64_t>
productClasses(const std::vector<int64_t> &x, const std::vector<int64_t> &y,
               std::vector<std::pair<int64_t, int64_t>> &pairs) {
  std::map<std::pair<int64_t, int64_t>, int64_t> ids;
  std::vector<int64_t> classes;
  for (size_t s = 0; s < x.size(); ++s) {
    auto [it, added] = ids.try_emplace({x[s], y[s]}, pairs.size());
    if (added)
      pairs.push_back({x[s], y[s]});
    classes.push_back(it->second);
  }
  return classes;
}

class Reducer {
public:
  explicit Reducer(const ChoiceProblem &problem) : problem(problem) {}

  ReducedProblem run();

private:
  void addEdge(int64_t a, int64_t b, std::vector<int64_t> aClass,
               std::vector<int64_t> bClass,
               std::vector<std::vector<double>> cost,
               std::vector<std::vector<double>> hideable = {});
  void removeEdge(int64_t e);
  /// Folds edge `e` into a side's costs if the other side has one class;
  /// whether it did.
  bool foldIfOneSided(int64_t e);
  void eliminate(int64_t u);

  const ChoiceProblem &problem;
  std::vector<std::vector<double>> costs;
  std::vector<WorkEdge> edges;
  /// Each node's neighbours and the edge to each.
  std::vector<std::map<int64_t, int64_t>> adjacent;
  std::vector<char> pinned, removed;
  std::deque<int64_t> worklist;
  ReducedProblem reduced;
};

void Reducer::addEdge(int64_t a, int64_t b, std::vector<int64_t> aClass,
                      std::vector<int64_t> bClass,
                      std::vector<std::vector<double>> cost,
                      std::vector<std::vector<double>> hideable) {
  if (a > b) {
    std::swap(a, b);
    std::swap(aClass, bClass);
    auto transpose = [&](std::vector<std::vector<double>> &table) {
      if (table.empty())
        return;
      std::vector<std::vector<double>> transposed(
          numClasses(aClass), std::vector<double>(numClasses(bClass)));
      for (size_t i = 0; i < table.size(); ++i)
        for (size_t j = 0; j < table[i].size(); ++j)
          transposed[j][i] = table[i][j];
      table = std::move(transposed);
    };
    transpose(cost);
    transpose(hideable);
  }
  auto existing = adjacent[a].find(b);
  if (existing != adjacent[a].end()) {
    // Two edges between the same nodes: one, over pairs of their classes.
    WorkEdge &old = edges[existing->second];
    std::vector<std::pair<int64_t, int64_t>> aPairs, bPairs;
    std::vector<int64_t> mergedA = productClasses(old.aClass, aClass, aPairs);
    std::vector<int64_t> mergedB = productClasses(old.bClass, bClass, bPairs);
    std::vector<std::vector<double>> merged(aPairs.size(),
                                            std::vector<double>(bPairs.size()));
    std::vector<std::vector<double>> mergedHideable;
    if (!old.hideable.empty() || !hideable.empty())
      mergedHideable = merged;
    for (size_t i = 0; i < aPairs.size(); ++i)
      for (size_t j = 0; j < bPairs.size(); ++j) {
        auto [oldA, newA] = aPairs[i];
        auto [oldB, newB] = bPairs[j];
        merged[i][j] = old.cost[oldA][oldB] + cost[newA][newB];
        if (!mergedHideable.empty())
          mergedHideable[i][j] =
              (old.hideable.empty() ? 0 : old.hideable[oldA][oldB]) +
              (hideable.empty() ? 0 : hideable[newA][newB]);
      }
    old.aClass = std::move(mergedA);
    old.bClass = std::move(mergedB);
    old.cost = std::move(merged);
    old.hideable = std::move(mergedHideable);
    foldIfOneSided(existing->second);
    return;
  }
  int64_t e = edges.size();
  edges.push_back({a, b, std::move(aClass), std::move(bClass), std::move(cost),
                   std::move(hideable)});
  adjacent[a][b] = e;
  adjacent[b][a] = e;
  foldIfOneSided(e);
}

void Reducer::removeEdge(int64_t e) {
  WorkEdge &edge = edges[e];
  edge.alive = false;
  adjacent[edge.a].erase(edge.b);
  adjacent[edge.b].erase(edge.a);
  worklist.push_back(edge.a);
  worklist.push_back(edge.b);
}

bool Reducer::foldIfOneSided(int64_t e) {
  WorkEdge &edge = edges[e];
  if (!edge.hideable.empty())
    return false;
  if (numClasses(edge.aClass) == 1) {
    for (size_t t = 0; t < costs[edge.b].size(); ++t)
      costs[edge.b][t] += edge.cost[0][edge.bClass[t]];
  } else if (numClasses(edge.bClass) == 1) {
    for (size_t s = 0; s < costs[edge.a].size(); ++s)
      costs[edge.a][s] += edge.cost[edge.aClass[s]][0];
  } else {
    return false;
  }
  removeEdge(e);
  return true;
}

void Reducer::eliminate(int64_t u) {
  ReducedProblem::Elimination step;
  step.node = u;
  const std::vector<double> &mine = costs[u];
  // u's classes on each edge, and the neighbour's, as seen from u.
  std::vector<int64_t> edgeIds;
  for (auto [neighbour, e] : adjacent[u]) {
    const WorkEdge &edge = edges[e];
    bool uIsA = edge.a == u;
    step.neighbours.push_back(neighbour);
    step.neighbourClasses.push_back(uIsA ? edge.bClass : edge.aClass);
    edgeIds.push_back(e);
  }
  auto edgeCost = [&](size_t k, size_t s, int64_t theirs) {
    const WorkEdge &edge = edges[edgeIds[k]];
    return edge.a == u ? edge.cost[edge.aClass[s]][theirs]
                       : edge.cost[theirs][edge.bClass[s]];
  };
  // The cheapest choice for each combination of the neighbours' classes
  // (none, one or two neighbours).
  std::vector<int64_t> sizes;
  for (const auto &classes : step.neighbourClasses)
    sizes.push_back(numClasses(classes));
  int64_t rows = sizes.size() > 0 ? sizes[0] : 1;
  int64_t cols = sizes.size() > 1 ? sizes[1] : 1;
  std::vector<std::vector<double>> best(rows, std::vector<double>(cols));
  step.table.assign(rows, std::vector<int64_t>(cols, 0));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double least = kForbidden;
      int64_t chosen = 0;
      for (size_t s = 0; s < mine.size(); ++s) {
        double cost = mine[s];
        if (sizes.size() > 0)
          cost += edgeCost(0, s, i);
        if (sizes.size() > 1)
          cost += edgeCost(1, s, j);
        if (cost < least) {
          least = cost;
          chosen = s;
        }
      }
      best[i][j] = least;
      step.table[i][j] = chosen;
    }
  for (int64_t e : edgeIds)
    removeEdge(e);
  removed[u] = 1;
  if (sizes.empty()) {
    reduced.constant += best[0][0];
  } else if (sizes.size() == 1) {
    int64_t v = step.neighbours[0];
    for (size_t t = 0; t < costs[v].size(); ++t)
      costs[v][t] += best[step.neighbourClasses[0][t]][0];
  } else {
    addEdge(step.neighbours[0], step.neighbours[1], step.neighbourClasses[0],
            step.neighbourClasses[1], std::move(best));
  }
  reduced.eliminated.push_back(std::move(step));
}

ReducedProblem Reducer::run() {
  const int64_t numNodes = problem.nodes.size();
  costs.resize(numNodes);
  for (int64_t u = 0; u < numNodes; ++u)
    costs[u] = problem.nodes[u].costs;
  adjacent.resize(numNodes);
  pinned.assign(numNodes, 0);
  removed.assign(numNodes, 0);
  if (problem.memoryLimit > 0)
    for (int64_t u = 0; u < numNodes; ++u)
      for (double held : problem.nodes[u].memory)
        pinned[u] |= held != 0;
  // A paid program's cover and hideable pairs are in its rows: their nodes
  // stay, and so do those edges.
  if (problem.sharedPaid)
    for (int64_t u = 0; u < numNodes; ++u)
      for (double cover : problem.nodes[u].cover)
        pinned[u] |= cover != 0;
  for (const ChoiceEdge &edge : problem.edges) {
    std::vector<std::vector<double>> hideable;
    if (problem.sharedPaid && !edge.shared.empty()) {
      hideable.assign(edge.cost.size(), {});
      bool any = false;
      for (size_t a = 0; a < edge.cost.size(); ++a)
        for (size_t b = 0; b < edge.cost[a].size(); ++b) {
          hideable[a].push_back(edge.hideable(a, b));
          any |= hideable[a][b] != 0;
        }
      if (any)
        pinned[edge.from] = pinned[edge.to] = 1;
      else
        hideable.clear();
    }
    addEdge(edge.from, edge.to, edge.fromClass, edge.toClass, edge.cost,
            std::move(hideable));
  }
  for (int64_t u = 0; u < numNodes; ++u)
    worklist.push_back(u);
  while (!worklist.empty()) {
    int64_t u = worklist.front();
    worklist.pop_front();
    if (!removed[u] && !pinned[u] && adjacent[u].size() <= 2)
      eliminate(u);
  }

  // The nodes left, renumbered, with their folded costs, and the edges left.
  reduced.kept.assign(numNodes, -1);
  ChoiceProblem &left = reduced.problem;
  left.memoryLimit = problem.memoryLimit;
  left.sharedPaid = problem.sharedPaid;
  left.sharedCost = problem.sharedPaid ? problem.sharedCost : 0;
  for (int64_t u = 0; u < numNodes; ++u) {
    if (removed[u])
      continue;
    reduced.kept[u] = left.nodes.size();
    left.nodes.push_back({costs[u], problem.nodes[u].memory,
                          problem.sharedPaid ? problem.nodes[u].cover
                                             : std::vector<double>()});
  }
  for (const WorkEdge &edge : edges) {
    if (!edge.alive)
      continue;
    ChoiceEdge kept{reduced.kept[edge.a], reduced.kept[edge.b], edge.aClass,
                    edge.bClass, edge.cost, {}};
    if (!edge.hideable.empty()) {
      kept.sharedSeconds = edge.hideable;
      kept.shared.assign(edge.hideable.size(), {});
      for (size_t a = 0; a < edge.hideable.size(); ++a)
        for (double part : edge.hideable[a])
          kept.shared[a].push_back(part != 0);
    }
    left.edges.push_back(std::move(kept));
  }
  return std::move(reduced);
}

} // namespace

ReducedProblem reduceChoices(const ChoiceProblem &problem) {
  return Reducer(problem).run();
}

std::vector<int64_t>
ReducedProblem::expand(const std::vector<int64_t> &leftChoices) const {
  std::vector<int64_t> choices(kept.size(), -1);
  for (size_t u = 0; u < kept.size(); ++u)
    if (kept[u] >= 0)
      choices[u] = leftChoices[kept[u]];
  for (auto step = eliminated.rbegin(); step != eliminated.rend(); ++step) {
    int64_t i = 0, j = 0;
    if (!step->neighbours.empty())
      i = step->neighbourClasses[0][choices[step->neighbours[0]]];
    if (step->neighbours.size() > 1)
      j = step->neighbourClasses[1][choices[step->neighbours[1]]];
    choices[step->node] = step->table[i][j];
  }
  return choices;
}

} // namespace partita::autoshard
